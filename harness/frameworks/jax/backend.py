"""JAX backend: plain JAX (jax.numpy, jax.lax) with Optax's SGD, the whole
training iteration one jitted function.

Why this is long: one framework's translation of every layer kind of the ten
networks plus its training session, as in the other backends.

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
`jit` is JAX's only compile mode (COMPILE_MODES): the first call traces and
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
import math
import os
import re

from ... import cudalibs
from ... import networks as nets
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory

NAME = "jax"
DEVICES = ("cpu", "gpu")
COMPILE_MODES = ("jit",)
PRECISIONS = ("default", "fp32", "tf32", "bf16", "fp16")
# Mixed precision: the compute type of the layers (jnp dtype names).
COMPUTE_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
# jax_default_matmul_precision per precision (None: left unset).
MATMUL_PRECISION = {"fp32": "highest", "tf32": "tensorfloat32"}
# Values of jax_default_matmul_precision that forbid TF32 on the GPU.
STRICT_VALUES = ("highest", "float32", "precision.highest", "f32_f32_f32")

# The device configure() was called for: JAX's allocation failures
# ("RESOURCE_EXHAUSTED: Out of memory while trying to allocate ...") name no
# device, so whether one means the GPU ran out depends on where the cell runs.
_CONFIGURED = {}


def _jax():
    # Imported here so that `harness.frameworks` never loads a framework the
    # cell does not use, and so that the CPU affinity is set before XLA
    # sizes its thread pools.
    import jax
    return jax


def _optax():
    import optax
    return optax


def _np():
    import numpy
    return numpy


# --- versions, threads, devices ------------------------------------------------

def versions(device):
    jax = _jax()
    import jaxlib
    info = {"framework_version": jax.__version__, "cuda": None, "cudnn": None,
            "nccl": None, "jaxlib_version": jaxlib.__version__,
            "optax_version": _optax().__version__,
            "jax_backend": jax.default_backend()}
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
    missing = [k for k in ("cuda", "cudnn", "nccl") if k not in found]
    if missing:
        loaded, reasons = cudalibs.library_versions()
        for key in missing:
            found[key] = loaded[key]
            sources[key] = reasons[key]
    return found, sources


def _narrow_affinity(threads):
    """Keep the first `threads` CPUs this process may run on (all of them
    when it may run on fewer)."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, allowed[:threads])


def configure(threads, device, seed, cpu_devices=None, distributed=None):
    """`cpu_devices`: how many CPU devices XLA makes (the data-parallel
    module's workers); set before JAX's backends start. `distributed`:
    called with the jax module then too (jax.distributed.initialize must
    come before the backends)."""
    if threads is not None and device == "cpu":
        _narrow_affinity(threads)
    jax = _jax()
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", cpu_devices)
    if device != "gpu":
        jax.config.update("jax_platforms", "cpu")
    if distributed is not None:
        distributed(jax)
    if device == "gpu":
        if not _gpu_devices(jax):
            raise HarnessError("device gpu requested but JAX {} sees no GPU "
                               "(no CUDA plugin, or no driver)".format(
                                   jax.__version__))
    _CONFIGURED["device"] = device
    _CONFIGURED["seed"] = seed


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
    if precision == "tf32" and device != "gpu":
        raise Unsupported("tf32 is a tensor-core format of NVIDIA GPUs "
                          "(Ampere and newer); on the CPU XLA computes FP32 "
                          "whatever the matmul precision says")
    if precision == "fp16" and device != "gpu":
        backends.check_cpu_fp16("JAX")
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


# --- translation -------------------------------------------------------------
#
# Each translator returns a Layer: init(key) -> (params, state) and
# apply(params, state, x, train) -> (y, state). Images are NHWC; params of a
# layer are a dict (empty when it has none), state holds batch-norm running
# statistics.

class Layer(object):
    def __init__(self, init, apply):
        self.init = init
        self.apply = apply


def _stateless(apply, init=None):
    """A Layer whose apply(params, x) keeps no state."""
    return Layer(init or (lambda key: ({}, {})),
                 lambda params, state, x, train: (apply(params, x), state))


def _glorot(key, shape, fan_in, fan_out):
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return _jax().random.uniform(key, shape, minval=-limit, maxval=limit)


def _activate(name, x):
    jnn = _jax().nn
    if name is None:
        return x
    return {"relu": jnn.relu, "sigmoid": jnn.sigmoid}[name](x)


def _linear(inputs, units, activation=None):
    jnp = _jax().numpy

    def init(key):
        return {"w": _glorot(key, (inputs, units), inputs, units),
                "b": jnp.zeros((units,))}, {}

    return _stateless(lambda p, x: _activate(activation, x @ p["w"] + p["b"]),
                      init)


def _dense(r, build):
    return _linear(r.in_shape[0], r.layer.units, r.layer.activation)


def _time_dense(r, build):
    # x @ w acts on the last axis: one projection per time step.
    return _linear(r.in_shape[1], r.layer.units)


def _conv(r, build):
    jax = _jax()
    jnp = jax.numpy
    layer = r.layer
    c_in, k = r.in_shape[0], layer.kernel
    # Explicit (before, after) on both spatial axes: TensorFlow's asymmetric
    # SAME padding too, in one op.
    padding = (tuple(layer.pad), tuple(layer.pad))

    def init(key):
        receptive = k * k
        params = {"w": _glorot(key, (k, k, c_in, layer.filters),
                               c_in * receptive, layer.filters * receptive)}
        if layer.bias:
            params["b"] = jnp.zeros((layer.filters,))
        return params, {}

    def apply(params, x):
        y = jax.lax.conv_general_dilated(
            x, params["w"], (layer.stride, layer.stride), padding,
            dimension_numbers=("NHWC", "HWIO", "NHWC"))
        if layer.bias:
            y = y + params["b"]
        return _activate(layer.activation, y)

    return _stateless(apply, init)


def _batch_norm(r, build):
    jnp = _jax().numpy
    layer = r.layer
    channels = r.in_shape[0]

    def init(key):
        return ({"gamma": jnp.ones((channels,)),
                 "beta": jnp.zeros((channels,))},
                {"mean": jnp.zeros((channels,)),
                 "var": jnp.ones((channels,))})

    def apply(params, state, x, train):
        axes = tuple(range(x.ndim - 1))  # all but the channels (last) axis
        # Statistics in FP32 whatever the compute type (mixed precision
        # keeps batch norm in FP32, as jmp's policies and autocast do); the
        # output goes on in the input's type.
        compute_dtype, x = x.dtype, x.astype(jnp.float32)
        if train:
            mean = x.mean(axes)
            var = x.var(axes)
            # The description's momentum is the decay of the running
            # statistics (PyTorch's is 1 - that); the running variance is
            # the unbiased one, as PyTorch and Keras keep it.
            count = x.size // channels
            decay = layer.momentum
            state = {"mean": decay * state["mean"] + (1 - decay) * mean,
                     "var": decay * state["var"] + (1 - decay) * var
                     * count / max(count - 1, 1)}
        else:
            mean, var = state["mean"], state["var"]
        y = (x - mean) * (params["gamma"] / jnp.sqrt(var + layer.eps)) \
            + params["beta"]
        return _activate(layer.activation, y.astype(compute_dtype)), state

    return Layer(init, apply)


def _activation(r, build):
    return _stateless(lambda p, x: _activate(r.layer.fn, x))


def _pool(r, build):
    jax = _jax()
    jnp = jax.numpy
    layer = r.layer
    _c, h, w = r.in_shape
    _c, out_h, out_w = r.out_shape
    k, s = layer.kernel, layer.stride
    # Ceil mode: pad the bottom/right so the last window that starts inside
    # the input is kept; max ignores the padding, averages divide by the
    # in-bounds count.
    padding = ((0, 0), (0, (out_h - 1) * s + k - h),
               (0, (out_w - 1) * s + k - w), (0, 0))
    window, strides = (1, k, k, 1), (1, s, s, 1)

    def apply(params, x):
        if layer.op == "max":
            return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window,
                                         strides, padding)
        sums = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides,
                                     padding)
        counts = jax.lax.reduce_window(jnp.ones((1, h, w, 1), x.dtype), 0.0,
                                       jax.lax.add, window, strides, padding)
        return sums / counts

    return _stateless(apply)


def _global_avg_pool(r, build):
    return _stateless(lambda p, x: x.mean((1, 2)))


def _flatten(r, build):
    # Flattens in memory order (NHWC); the weights are random, so the order
    # of the features does not matter.
    return _stateless(lambda p, x: x.reshape((x.shape[0], -1)))


def _residual(r, build):
    body_resolved, shortcut_resolved = r.children
    body = build(body_resolved)
    shortcut = None if shortcut_resolved is None else build(shortcut_resolved)
    activation = r.layer.activation
    jax = _jax()

    def init(key):
        body_key, shortcut_key = jax.random.split(key)
        body_params, body_state = body.init(body_key)
        if shortcut is None:
            return {"body": body_params}, {"body": body_state}
        short_params, short_state = shortcut.init(shortcut_key)
        return ({"body": body_params, "shortcut": short_params},
                {"body": body_state, "shortcut": short_state})

    def apply(params, state, x, train):
        out, body_state = body.apply(params["body"], state["body"], x, train)
        new_state = {"body": body_state}
        if shortcut is None:
            skip = x
        else:
            skip, new_state["shortcut"] = shortcut.apply(
                params["shortcut"], state["shortcut"], x, train)
        return _activate(activation, out + skip), new_state

    return Layer(init, apply)


def _subsample_pad(r, build):
    jnp = _jax().numpy
    stride = r.layer.stride
    extra = r.layer.channels - r.in_shape[0]

    def apply(params, x):
        x = x[:, ::stride, ::stride, :]
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (0, extra)))

    return _stateless(apply)


def _embedding(r, build):
    jax = _jax()
    layer = r.layer

    def init(key):
        return {"table": jax.random.uniform(key, (layer.vocab, layer.dim),
                                            minval=-0.05, maxval=0.05)}, {}

    return _stateless(lambda p, x: p["table"][x], init)


def _lstm(r, build):
    jax = _jax()
    jnp = jax.numpy
    layer = r.layer
    hidden = layer.hidden
    sizes = [r.in_shape[1]] + [hidden] * (layer.layers - 1)

    def init(key):
        params = []
        for inputs, key in zip(sizes, jax.random.split(key, layer.layers)):
            ih_key, hh_key = jax.random.split(key)
            # Gates i, f, g, o side by side; one bias vector per gate
            # (parameter_count's convention), zero, forget gate included.
            params.append({
                "w_ih": _glorot(ih_key, (inputs, 4 * hidden), inputs,
                                4 * hidden),
                "w_hh": _glorot(hh_key, (hidden, 4 * hidden), hidden,
                                4 * hidden),
                "b": jnp.zeros((4 * hidden,))})
        return params, {}

    def cell(w_hh, carry, projected):
        h, c = carry
        gates = projected + h @ w_hh
        i, f, g, o = jnp.split(gates, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def apply(params, x):
        # (batch, steps, features) -> time-major for lax.scan.
        x = jnp.swapaxes(x, 0, 1)
        zeros = jnp.zeros((x.shape[1], hidden), x.dtype)
        for p in params:
            # The input projection of every step is one matrix product;
            # only the recurrent product runs step by step.
            projected = x @ p["w_ih"] + p["b"]
            _carry, x = jax.lax.scan(
                lambda carry, step, w=p["w_hh"]: cell(w, carry, step),
                (zeros, zeros), projected)
        return jnp.swapaxes(x, 0, 1)

    return _stateless(apply, init)


# Layer kind -> translator(resolved, build) returning a Layer: _dense for
# nets.Dense and so on (backends.translator_name).
TRANSLATORS = backends.translators(globals(), NAME)


def _sequence(resolved_layers):
    jax = _jax()
    layers = [backends.translator(TRANSLATORS, r.layer, NAME)(r, _sequence)
              for r in resolved_layers]

    def init(key):
        params, state = [], []
        for layer, key in zip(layers, jax.random.split(key, len(layers))):
            p, s = layer.init(key)
            params.append(p)
            state.append(s)
        return params, state

    def apply(params, state, x, train):
        new_state = []
        for layer, p, s in zip(layers, params, state):
            x, s = layer.apply(p, s, x, train)
            new_state.append(s)
        return x, new_state

    return Layer(init, apply)


class Model(object):
    """A translated network: `apply(params, state, x, train) -> (y, state)`
    and its initial `params` and `state` (batch-norm statistics)."""

    def __init__(self, network, seed):
        jax = _jax()
        layer = _sequence(nets.resolve(network))
        self.apply = layer.apply
        self.params, self.state = layer.init(jax.random.key(seed))


def build_model(network, seed=0):
    """The network, initialised as described from `seed`: Glorot-uniform
    weights, zero biases, batch-norm gamma 1 and beta 0, embeddings
    uniform(-0.05, 0.05)."""
    return Model(network, seed)


def parameter_count(params):
    return sum(int(leaf.size) for leaf in _jax().tree_util.tree_leaves(params))


def input_shape(network):
    """Per-sample input shape as the model takes it: images NHWC (the
    description is channels-first)."""
    shape = tuple(network.input_shape)
    if len(shape) == 3:
        return shape[1:] + shape[:1]
    return shape


def make_optimizer(network):
    """Plain SGD with the network's learning rate and momentum. Optax's
    momentum (t = g + m t; w -= lr t) is PyTorch's."""
    momentum = network.momentum or None
    return _optax().sgd(network.learning_rate, momentum=momentum)


def loss(logits, labels):
    """Mean softmax cross-entropy over samples, or over tokens when logits
    are (batch, steps, classes)."""
    return _optax().softmax_cross_entropy_with_integer_labels(
        logits.reshape((-1, logits.shape[-1])), labels.reshape(-1)).mean()


class LossScale(object):
    """Dynamic loss scaling for fp16, with torch.amp.GradScaler's constants:
    the loss is multiplied by `scale` before differentiation and the
    gradients divided by it; a step whose gradients are not all finite is
    skipped (weights, optimizer state and batch-norm statistics kept) and
    halves the scale; GROWTH_INTERVAL finite steps in a row double it."""
    INITIAL = 2.0 ** 16
    GROWTH_INTERVAL = 2000
    DESCRIPTION = ("dynamic (in the jitted step: initial 2^16, halved and the "
                   "step skipped on non-finite gradients, doubled after 2000 "
                   "finite steps; torch.amp.GradScaler's constants)")

    @staticmethod
    def init():
        jnp = _jax().numpy
        return {"scale": jnp.asarray(LossScale.INITIAL, jnp.float32),
                "good_steps": jnp.asarray(0, jnp.int32)}

    @staticmethod
    def update(scaler, finite):
        jnp = _jax().numpy
        good = jnp.where(finite, scaler["good_steps"] + 1, 0)
        grow = good >= LossScale.GROWTH_INTERVAL
        scale = jnp.where(finite, jnp.where(grow, scaler["scale"] * 2.0,
                                            scaler["scale"]),
                          jnp.maximum(scaler["scale"] * 0.5, 1.0))
        return {"scale": scale, "good_steps": jnp.where(grow, 0, good)}


def _cast_floating(tree, dtype):
    """The tree's floating-point leaves cast to `dtype` (integer token ids
    stay as they are)."""
    jax = _jax()
    jnp = jax.numpy
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating)
        else a, tree)


def make_train_step(apply, optimizer, donate=True, precision="default"):
    """(params, state, opt_state, inputs, labels) -> (params, state,
    opt_state, loss), jitted: forward, gradient and update in one XLA
    program. `donate`: the old parameters' buffers are reused for the new.
    `precision` "bf16"/"fp16": mixed precision (the module's docstring);
    for fp16 `opt_state` is (the optimizer's state, LossScale.init())."""
    jax = _jax()
    jnp = jax.numpy
    optax = _optax()
    compute = COMPUTE_DTYPES.get(precision)

    def objective(params, state, inputs, labels):
        if compute is not None:
            params, inputs = _cast_floating((params, inputs),
                                            jnp.dtype(compute))
        logits, state = apply(params, state, inputs, True)
        # Softmax and loss in FP32 (a no-op without mixed precision).
        return loss(logits.astype(jnp.float32), labels), state

    def step(params, state, opt_state, inputs, labels):
        (value, state), grads = jax.value_and_grad(objective, has_aux=True)(
            params, state, inputs, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), state, opt_state, value

    def scaled_step(params, state, opt_state, inputs, labels):
        inner, scaler = opt_state

        def scaled(params_):
            value, new_state = objective(params_, state, inputs, labels)
            return value * scaler["scale"], (value, new_state)

        (_scaled, (value, new_state)), grads = jax.value_and_grad(
            scaled, has_aux=True)(params)
        grads = jax.tree_util.tree_map(lambda g: g / scaler["scale"], grads)
        finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g)) for g in
                                      jax.tree_util.tree_leaves(grads)]))
        updates, new_inner = optimizer.update(grads, inner, params)
        new_params = optax.apply_updates(params, updates)
        keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
            lambda n, o: jnp.where(finite, n, o), new, old)
        return (keep(new_params, params), keep(new_state, state),
                (keep(new_inner, inner), LossScale.update(scaler, finite)),
                value)

    return jax.jit(scaled_step if precision == "fp16" else step,
                   donate_argnums=(0, 1, 2) if donate else ())


# --- training ------------------------------------------------------------------

class Session(backends.Session):
    def __init__(self, network, model, inputs, labels, device,
                 precision="default"):
        super(Session, self).__init__(network, model, inputs, labels)
        self.device = device
        self.precision = precision
        self.parameters = parameter_count(model.params)
        self.params, self.state = model.params, model.state
        optimizer = make_optimizer(network)
        self.opt_state = optimizer.init(self.params)
        self.loss_scaling = None
        # What XLA's CPU backend makes of bf16/fp16 matrix products and
        # convolutions (jaxlib 0.10.2): it converts their operands to FP32
        # and computes in FP32 (tests/test_precision_jax.py reads the
        # compiled HLO); elementwise work stays in the compute type.
        self.precision_note = (
            "on the CPU XLA computes {} matrix products and convolutions in "
            "FP32 (operands converted): the values are rounded to {}, the "
            "arithmetic is not faster".format(precision, precision)
            if precision in COMPUTE_DTYPES and device == "cpu" else None)
        if precision == "fp16":
            self.opt_state = (self.opt_state, LossScale.init())
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


def batch_arrays(network, batch):
    """numpy (inputs, labels) of a harness.data.Batch, images NHWC, with
    the dtypes the model takes (int32 token ids: JAX's default)."""
    np = _np()
    dtype = np.int32 if network.input_dtype == "int64" else np.float32
    inputs = np.array(batch.inputs, dtype=dtype).reshape(batch.input_shape)
    if inputs.ndim == 4:
        inputs = inputs.transpose(0, 2, 3, 1)
    labels = np.array(batch.labels, dtype=np.int32).reshape(batch.label_shape)
    return np.ascontiguousarray(inputs), labels


def random_batch(network, batch_size, seed):
    """A synthetic mini-batch drawn with JAX's generator from `seed`, on the
    default device: N(0, 1) inputs or uniform token ids, uniform labels."""
    jax = _jax()
    input_key, label_key = jax.random.split(jax.random.key(seed + 1))
    shape = (batch_size,) + input_shape(network)
    if network.input_dtype == "int64":
        inputs = jax.random.randint(input_key, shape, 0, network.classes)
        labels = jax.random.randint(label_key, shape, 0, network.classes)
    else:
        inputs = jax.random.normal(input_key, shape)
        labels = jax.random.randint(label_key, (batch_size,), 0,
                                    network.classes)
    return inputs, labels


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode="jit"):
    # "jit" is the one mode offered (COMPILE_MODES): the step is always jitted.
    _set_math(precision, device)
    jax = _jax()
    target = jax.devices("gpu" if device == "gpu" else "cpu")[0]
    with jax.default_device(target):
        model = build_model(network, seed)
        if batch is None:
            inputs, labels = random_batch(network, batch_size, seed)
        else:
            inputs, labels = (jax.device_put(a, target)
                              for a in batch_arrays(network, batch))
    session = Session(network, model, inputs, labels, device, precision)
    if precision == "fp32":
        _check_strict(session)
    return session
