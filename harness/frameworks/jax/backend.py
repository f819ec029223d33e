"""JAX backend: plain JAX (jax.numpy, jax.lax) with Optax's SGD, the whole
training iteration one jitted function.

The translation of every layer kind is in layers.py beside it, the jitted
training step in step.py (both re-exported here); this module holds the
versions, threads, precision and the training session.

Why plain JAX and not Flax: the networks are data (harness.networks), and a
functional translation of that data is a short table of jax.lax calls in
which every initialiser, padding and pooling rule stands where the
description states it. Flax's linen would bring its dependency closure
(orbax, tensorstore, msgpack, rich) into every image and defaults that each
would have to be overridden (LeCun-normal kernels, an LSTM cell with an
orthogonal recurrent kernel); the program XLA compiles is the same, since
Flax modules lower to the same lax operations.

The fast path a JAX user would time: one `jax.jit` of loss, gradient and
Optax update together, parameters and optimizer state donated to it (updated
in place), the mini-batch made once on the device, NHWC images (JAX's
convention; on the GPU XLA's layout assignment picks cuDNN's layout itself).
`jit` is JAX's only compile mode (CAPABILITIES): the first call traces and
compiles, so the warm-up covers compilation.

Precision (the cell's `precision`; docs/precision.md): "default" leaves
`jax_default_matmul_precision` unset, so matrix products and convolutions
get XLA's DEFAULT precision: FP32 on the CPU, TF32 on GPUs that have it
(lax.Precision's docstring: A100, H100), FP32 on older ones. "fp32" sets it
to "highest" and checks, in the traced training step, that every matrix
product and convolution carries Precision.HIGHEST; "tf32" sets it to
"tensorfloat32" (GPU only). "bf16" and "fp16" are mixed precision, the
policy jmp (DeepMind's JAX mixed-precision library) calls
"params=float32,compute=bfloat16,output=float32": FP32 master weights and
optimizer state; inside the loss the floating parameters and inputs are
cast to the compute type, so every layer computes in it; batch-norm
statistics are taken in FP32; the logits are cast back to FP32 before the
softmax cross-entropy; gradients arrive in FP32 through the casts. fp16
adds dynamic loss scaling inside the jitted step, with GradScaler's
constants (harness.frameworks.jax.backend.LossScale).

Threads: XLA's CPU runtime has no intra-op thread setting; its thread pools
size themselves by the CPUs the process may run on. configure() therefore
narrows the process's CPU affinity to `threads` CPUs before JAX starts, and
effective_threads() reports the affinity XLA saw (harness.threads' variables
cover oneDNN/OpenMP besides).
"""
import os
import re

from ...gpu import cudalibs
from .. import backends
from ...errors import HarnessError, device_out_of_memory
from . import transformer
# The translation and the training step live beside this module (one
# concern each); their public names are the backend's.
from .layers import (  # noqa: F401
    NAME, TRANSLATORS, Layer, Model, build_model, count_parameters,
    input_shape, target)
from .load import _jax, _np, _optax
# What a group worker frees between cells (harness.worker).
from .memory import release_memory  # noqa: F401
from .step import (  # noqa: F401
    COMPUTE_DTYPES, LossScale, loss, make_optimizer, make_train_step)

DEVICES = ("cpu", "gpu")
CAPABILITIES = backends.capabilities(
    precisions=("default", "fp32", "tf32", "bf16", "fp16"),
    compile_modes=("jit",))
# jax_default_matmul_precision per precision (None: left unset).
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}
# Values of jax_default_matmul_precision that forbid TF32 on the GPU.
STRICT_VALUES = ("highest", "float32", "precision.highest", "f32_f32_f32")

# The device configure() was called for: JAX's allocation failures
# ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...") name no
# device, so whether one means the GPU ran out depends on where the cell runs.
_CONFIGURED = {}


# --- versions, threads, devices ------------------------------------------------

def versions(device):
    jax = _jax()
    import jaxlib
    info = {"framework_version": jax.__version__, "cuda": None, "cudnn": None,
            "nccl": None, "jaxlib_version": jaxlib.__version__,
            "optax_version": _optax().__version__,
            "jax_backend": jax.default_backend(),
            # Off on the CPU (_run_steps_inline); None where JAX lacks it.
            "jax_cpu_async_dispatch": getattr(jax.config, "values", {}).get(
                "jax_cpu_enable_async_dispatch")}
    return backends.with_library_versions(info, device, _cuda_versions)


def _cuda_versions():
    """CUDA and cuDNN as the CUDA plugin reports them, NCCL (and whatever
    the plugin does not answer) from the libraries loaded in the process."""
    found, sources = {}, {}
    try:
        from jax._src.lib import cuda_versions
    except ImportError:
        cuda_versions = None
    if cuda_versions is not None:
        for key, name, fmt in (
                ("cuda", "cuda_runtime_get_version", cudalibs.format_cuda),
                ("cudnn", "cudnn_get_version", cudalibs.format_cudnn)):
            getter = getattr(cuda_versions, name, None)
            code = getter() if getter is not None else None
            if code:
                found[key] = fmt(code)
                sources[key] = "jax._src.lib.cuda_versions.{}()".format(name)
    return cudalibs.fill_from_loaded(found, sources)


def _narrow_affinity(threads):
    """Keep the first `threads` CPUs this process may run on (all of them
    when it may run on fewer)."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, allowed[:threads])


def configure(threads, device, seed):
    configure_workers(threads, device, seed, None, None)


def configure_workers(threads, device, seed, cpu_devices, distributed):
    """configure() for the data-parallel module. `cpu_devices`: how many
    CPU devices XLA makes (its workers; None: XLA's default); set before
    JAX's backends start. `distributed`: None, or called with the jax
    module then too (jax.distributed.initialize must come before the
    backends)."""
    if threads is not None and device == "cpu":
        _narrow_affinity(threads)
    jax = _jax()
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", cpu_devices)
    if device != "gpu":
        jax.config.update("jax_platforms", "cpu")
        _run_steps_inline(jax)
    if distributed is not None:
        distributed(jax)
    if device == "gpu":
        if not _gpu_devices(jax):
            raise HarnessError("device gpu requested but JAX {} sees no GPU "
                               "(no CUDA plugin, or no driver)".format(
                                   jax.__version__))
    _CONFIGURED["device"] = device
    _CONFIGURED["seed"] = seed


def _run_steps_inline(jax):
    """On the CPU, JAX hands each computation to one of its client's pool
    threads, and each thread that runs a step grows its own malloc arena
    the first time it does (alexnet-r at batch 16: 5,100 page faults,
    8 ms of a 20 ms step), which a fresh process paid at whichever later
    step first landed on a new thread, often after the warm-up, and a
    worker whose earlier cells had grown them did not (a cell after others
    3-5% faster: docs/measurements/isolation-2026-12-02). Run inline, every
    step runs on the calling thread, whose arena the warm-up grows; the
    harness waits for each step's result anyway, so nothing overlapped.
    JAX before 0.4.31 has no such setting and dispatches as it does."""
    try:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    except (AttributeError, KeyError, ValueError):
        pass


def _gpu_devices(jax):
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend at all
        return []


def gpu_count():
    return len(_gpu_devices(_jax()))


def effective_threads():
    """The CPUs XLA's CPU thread pools were sized by (see the module's
    docstring); XLA has no thread count of its own to read back."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def math_mode(device):
    """What FP32 matrix products and convolutions run as, read back from
    jax_default_matmul_precision. XLA's DEFAULT and HIGH precision use TF32
    on GPUs that have it (compute capability 8.0 and newer; lax.Precision's
    docstring), "highest"/"float32" forbids it; on the CPU precision has no
    effect (FP32)."""
    if device != "gpu":
        return {"matmul": "fp32", "conv": "fp32"}
    precision = _jax().config.jax_default_matmul_precision
    strict = str(precision).lower() in STRICT_VALUES
    mode = "fp32" if strict or not _has_tf32() else "tf32"
    return {"matmul": mode, "conv": mode}


def _has_tf32():
    """Whether the first GPU has TF32 tensor cores; True when JAX sees no
    GPU to ask (math_mode asked without one: the docstring's A100/H100)."""
    gpus = _gpu_devices(_jax())
    capability = getattr(gpus[0], "compute_capability", None) if gpus else None
    try:
        return capability is None or int(str(capability).split(".")[0]) >= 8
    except ValueError:
        return True


def _set_math(precision, device):
    """Set jax_default_matmul_precision for `precision` (before anything is
    traced); Unsupported for what this device lacks."""
    backends.check_precision_off_gpu(
        precision, device, "JAX",
        "on the CPU XLA computes FP32 whatever the matmul precision says")
    value = MATMUL_PRECISION.get(precision)
    if value is None:
        return
    jax = _jax()
    jax.config.update("jax_default_matmul_precision", value)
    now = jax.config.jax_default_matmul_precision
    if str(now).lower() != value:
        raise HarnessError("jax_default_matmul_precision reads back {!r}, "
                           "not {!r}".format(now, value))


def matmul_ops(closed_jaxpr):
    """[(primitive name, precision, input dtypes)] of every matrix product
    and convolution in a (closed) jaxpr, sub-jaxprs (jit, scan, custom
    derivatives) included."""
    found = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in ("dot_general", "conv_general_dilated"):
                found.append((eqn.primitive.name, eqn.params.get("precision"),
                              tuple(str(v.aval.dtype) for v in eqn.invars)))
            for value in eqn.params.values():
                for sub in (value if isinstance(value, (list, tuple))
                            else (value,)):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(getattr(closed_jaxpr, "jaxpr", closed_jaxpr))
    return found


def compiled_matmul_types(hlo_text):
    """[(op, operand element types)] of the matrix products and convolutions
    in XLA's compiled HLO text: `dot` and `convolution` instructions, and the
    cuBLAS/cuDNN custom calls the GPU backend turns them into. What the
    device computes, which the jaxpr (what JAX asked for) need not be: XLA
    may convert operands first."""
    types, ops = {}, []
    defined = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(\w+)\[")
    call = re.compile(r"=\s*[^=]*?\s(dot|convolution|custom-call)\(([^)]*)\)")
    for line in hlo_text.splitlines():
        match = defined.match(line)
        if match:
            types[match.group(1)] = match.group(2)
    for line in hlo_text.splitlines():
        match = call.search(line)
        if not match:
            continue
        op = match.group(1)
        if op == "custom-call":
            target = re.search(r'custom_call_target="([^"]*)"', line)
            target = target.group(1) if target else ""
            if "gemm" not in target.lower() and "conv" not in target.lower():
                continue
            op = target
        # Operands as "%name" or "type[shape]{layout} %name".
        names = re.findall(r"%([\w.\-]+)", match.group(2))
        ops.append((op, tuple(types.get(n, "?") for n in names[:2])))
    return ops


def _check_strict(session):
    """Strict fp32: every matrix product and convolution of the traced
    training step asks for HIGHEST precision (not only the config says so)."""
    ops = matmul_ops(session.jaxpr())
    loose = sorted(set("{} {}".format(name, precision)
                       for name, precision, _dtypes in ops
                       if "HIGHEST" not in str(precision)))
    if not ops or loose:
        raise HarnessError("strict fp32: the training step has {}".format(
            ", ".join(loose) or "no matrix products to check"))


def is_out_of_memory(exc):
    """The GPU ran out. JAX's "RESOURCE_EXHAUSTED: Out of memory while
    trying to allocate N bytes" names no device: it is `oom` when this
    process runs a GPU cell, an error on the CPU (harness.frameworks:
    is_out_of_memory). Reads the message only: JAX may be what failed to
    import."""
    if device_out_of_memory(exc):
        return True
    text = str(exc).lower()
    return (_CONFIGURED.get("device") == "gpu"
            and ("resource_exhausted" in text or "out of memory" in text))



# --- training ------------------------------------------------------------------

class Session(backends.Session):
    def __init__(self, network, model, inputs, labels, device,
                 precision="default"):
        super(Session, self).__init__(network, model, inputs, labels)
        self.device = device
        self.precision = precision
        self.parameters = count_parameters(model)
        self.attention = backends.attention_of(network,
                                                transformer.ATTENTION)
        self.params, self.state = model.params, model.state
        optimizer = make_optimizer(network)
        self.opt_state = optimizer.init(self.params)
        self.loss_scaling = None
        # What XLA's CPU backend makes of bf16/fp16 matrix products and
        # convolutions (jaxlib 0.10.2): it converts their operands to FP32
        # and computes in FP32 (tests/backends/test_precision_jax.py reads the
        # compiled HLO); elementwise work stays in the compute type.
        self.precision_note = (
            "on the CPU XLA computes {} matrix products and convolutions in "
            "FP32 (operands converted): the values are rounded to {}, the "
            "arithmetic is not faster".format(precision, precision)
            if precision in COMPUTE_DTYPES and device == "cpu" else None)
        if precision == "fp16":
            # Committed as the parameters are (layers.Model says why).
            self.opt_state = (self.opt_state, _jax().device_put(
                LossScale.init(), target(device)))
            self.loss_scaling = LossScale.DESCRIPTION
        self._step = make_train_step(model.apply, optimizer,
                                     precision=precision)

    def step(self):
        self.params, self.state, self.opt_state, value = self._step(
            self.params, self.state, self.opt_state, self.inputs, self.labels)
        # Every output of the step, not only the loss: the iteration ends
        # when the updated weights exist.
        _jax().block_until_ready((self.params, self.state, self.opt_state,
                                  value))
        return float(value)

    def compiled_text(self):
        """XLA's compiled training step (HLO text), compiled apart from the
        jitted step's own cache: for inspection, not for timing."""
        return self._step.lower(self.params, self.state, self.opt_state,
                                self.inputs, self.labels).compile().as_text()

    def jaxpr(self):
        """The training step as traced (not run, nothing donated)."""
        return _jax().make_jaxpr(self._step)(
            self.params, self.state, self.opt_state, self.inputs, self.labels)

    def output_shape(self):
        # The forward pass traced, not run: op-by-op (unjitted) execution of
        # resnet50 would take longer than the training step.
        out, _state = _jax().eval_shape(
            lambda params, state, x: self.model.apply(params, state, x, False),
            self.params, self.state, self.inputs)
        return tuple(out.shape[1:])


def _numpy_batch(network, batch):
    """numpy (inputs, labels) of a harness.data.batches.Batch, images NHWC,
    with the dtypes the model takes (int32 token ids: JAX's default)."""
    np = _np()
    dtype = np.int32 if network.input_dtype == "int64" else np.float32
    inputs = np.array(batch.inputs, dtype=dtype).reshape(batch.input_shape)
    if inputs.ndim == 4:
        inputs = inputs.transpose(0, 2, 3, 1)
    labels = np.array(batch.labels, dtype=np.int32).reshape(batch.label_shape)
    return np.ascontiguousarray(inputs), labels


def _random_batch(network, batch_size, seed):
    """A synthetic mini-batch drawn on the host from `seed` (numpy, as the
    initial weights: layers.py says why): N(0, 1) inputs or uniform token
    ids, uniform labels."""
    np = _np()
    input_rng, label_rng = (np.random.default_rng(key) for key in
                            np.random.SeedSequence(seed + 1).spawn(2))
    shape = (batch_size,) + input_shape(network)
    if network.input_dtype == "int64":
        inputs = input_rng.integers(0, network.classes, shape, dtype=np.int32)
        labels = label_rng.integers(0, network.classes, shape, dtype=np.int32)
    else:
        inputs = input_rng.standard_normal(shape, dtype=np.float32)
        labels = label_rng.integers(0, network.classes, (batch_size,),
                                    dtype=np.int32)
    return inputs, labels


def batch_arrays(network, batch_size, device, seed, batch=None):
    """The mini-batch (inputs, labels) as JAX arrays on `device`: `batch`
    (a harness.data.batches.Batch) when given, else drawn from `seed`."""
    arrays = (_random_batch(network, batch_size, seed) if batch is None
              else _numpy_batch(network, batch))
    return tuple(_jax().device_put(a, target(device)) for a in arrays)


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode=None):
    # "jit" is the one mode offered (CAPABILITIES): the step is always
    # jitted, whatever `compile_mode` says.
    _set_math(precision, device)
    model = build_model(network, batch_size, device, seed)
    inputs, labels = batch_arrays(network, batch_size, device, seed, batch)
    session = Session(network, model, inputs, labels, device, precision)
    if precision == "fp32":
        _check_strict(session)
    return session
