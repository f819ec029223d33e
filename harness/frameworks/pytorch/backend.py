"""PyTorch backend: eager nn.Module built from harness.networks.

The fast path a PyTorch expert would time for these models: eager mode,
cuDNN autotuning on (the paper's Torch scripts set cudnn.benchmark), SGD's
default update, gradients set to None instead of zeroed. SGD's default
(foreach=None, fused=None) is the multi-tensor for-each update when every
parameter is on the GPU and the per-parameter loop on the CPU
(torch.optim.optimizer._default_to_fused_or_foreach); the fused kernel is
opt-in and not used.

Precision (the cell's `precision`): "default" leaves PyTorch's switches as
shipped (TF32 for cuDNN convolutions, strict FP32 matrix products); "fp32"
switches TF32 and reduced-precision reductions off and reads them back;
"tf32" switches TF32 on for both (GPU only: PyTorch has no TF32 on the
CPU); "bf16" and "fp16" run forward and loss under torch.autocast with FP32
weights, fp16 with a dynamic GradScaler. Compilation (the cell's
`compile`): eager by default, as the paper timed the framework as shipped;
"default", "reduce-overhead" or "max-autotune" wrap the model in
torch.compile with that mode (forward and backward compiled, the optimizer
step eager); the first iterations compile, inside the warm-up.
"""
import os
import shutil
import sysconfig

from ...gpu import cudalibs
from .. import backends
from . import transformer
from ...errors import HarnessError, Unsupported, device_out_of_memory
# The translation lives beside this module; its public names are the
# backend's.
from .layers import build_model, count_parameters  # noqa: F401
from .load import _torch
# What a group worker frees between cells (harness.worker).
from .memory import release_memory  # noqa: F401

NAME = "pytorch"
DEVICES = ("cpu", "gpu")
CAPABILITIES = backends.capabilities(
    precisions=("default", "fp32", "tf32", "bf16", "fp16"),
    compile_modes=("none", "default", "reduce-overhead", "max-autotune"))


def versions(device):
    torch = _torch()
    info = {"framework_version": torch.__version__, "cuda": None,
            "cudnn": None, "nccl": None}
    if device == "gpu":
        info["cuda"] = torch.version.cuda
        cudnn = torch.backends.cudnn.version()
        info["cudnn"] = cudalibs.format_cudnn(cudnn) if cudnn else None
        try:
            nccl = torch.cuda.nccl.version()
            info["nccl"] = ".".join(str(v) for v in nccl) if isinstance(
                nccl, tuple) else str(nccl)
        except Exception:  # built without NCCL
            info["nccl"] = None
    return info


def configure(threads, device, seed):
    torch = _torch()
    if threads is not None:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:
            # Only settable before the first parallel region; harmless when a
            # caller (a test) has already run one in this process.
            pass
    if device == "gpu":
        if not torch.cuda.is_available():
            raise HarnessError("device gpu requested but PyTorch sees no CUDA "
                               "device (torch {})".format(torch.__version__))
        torch.backends.cudnn.benchmark = True
    torch.manual_seed(seed)
    # The first optimizer built imports torch._dynamo (torch.optim guards
    # its methods with it): 1.4 s on a 2-core CPU, once a process; here it
    # counts as the framework's import, which it is, not as a model build.
    if hasattr(torch, "compile"):  # PyTorch 2.0+
        import torch._dynamo  # noqa: F401


def gpu_count():
    torch = _torch()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def effective_threads():
    return _torch().get_num_threads()


def math_mode(device):
    """Whether FP32 matrix products and convolutions may run as TF32 on
    tensor cores (Ampere and newer): it decides which peak MFU is measured
    against. PyTorch's defaults: off for matmul, on for cuDNN convolutions.
    On the CPU, oneDNN's FP32 precision switches (PyTorch >= 2.9) say
    whether it may use a reduced format."""
    torch = _torch()
    backends_ = torch.backends
    if device != "gpu":
        mkldnn = backends_.mkldnn
        return dict((op, _named(_fp32_precision(
            getattr(getattr(mkldnn, op, None), "fp32_precision", "none"),
            (mkldnn, backends_)), "fp32"))
            for op in ("matmul", "conv"))
    if not _new_tf32_api(torch):
        return {"matmul": "tf32" if backends_.cuda.matmul.allow_tf32
                else "fp32",
                "conv": "tf32" if backends_.cudnn.allow_tf32 else "fp32"}
    matmul = _fp32_precision(backends_.cuda.matmul.fp32_precision,
                             (backends_.cuda, backends_))
    if matmul == "none":
        matmul = ("ieee" if torch.get_float32_matmul_precision() == "highest"
                  else "tf32")
    conv = _fp32_precision(backends_.cudnn.conv.fp32_precision,
                           (backends_.cudnn, backends_))
    # Unset everywhere: cuDNN's documented default, TF32 allowed.
    return {"matmul": _named(matmul, "fp32"), "conv": _named(conv, "tf32")}


def _new_tf32_api(torch):
    # PyTorch 2.9 replaced allow_tf32 by per-backend fp32_precision; the two
    # must not be mixed (reading allow_tf32 then raises).
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def _fp32_precision(value, parents):
    """A fp32_precision switch, "none" deferring to its parents in turn."""
    for parent in parents:
        if value != "none":
            break
        value = getattr(parent, "fp32_precision", "none")
    return value


def _named(value, unset):
    return {"ieee": "fp32", "tf32": "tf32", "bf16": "bf16"}.get(value, unset)


def _set_math(torch, precision, device):
    """Switch TF32 and reduced-precision reductions for `precision`; strict
    fp32 is read back and refused if anything still allows less."""
    backends.check_precision_off_gpu(
        precision, device, "PyTorch",
        "PyTorch has no TF32 mode to switch on for the CPU")
    if precision not in ("fp32", "tf32"):
        return
    strict = precision == "fp32"
    backends_ = torch.backends
    if _new_tf32_api(torch):
        value = "ieee" if strict else "tf32"
        backends_.cuda.matmul.fp32_precision = value
        backends_.cudnn.conv.fp32_precision = value
        backends_.cudnn.rnn.fp32_precision = value
        if strict:
            backends_.mkldnn.matmul.fp32_precision = "ieee"
            backends_.mkldnn.conv.fp32_precision = "ieee"
    else:
        backends_.cuda.matmul.allow_tf32 = not strict
        backends_.cudnn.allow_tf32 = not strict
    if strict:
        matmul = backends_.cuda.matmul
        matmul.allow_fp16_reduced_precision_reduction = False
        matmul.allow_bf16_reduced_precision_reduction = False
        still = [k for k, v in math_mode(device).items() if v != "fp32"]
        if still or matmul.allow_fp16_reduced_precision_reduction or \
                matmul.allow_bf16_reduced_precision_reduction:
            raise HarnessError("strict fp32: PyTorch still allows reduced "
                               "precision for {}".format(
                                   ", ".join(still) or "reductions"))


def _autocast(torch, precision, device):
    """The context a step's forward and loss run in."""
    if precision not in ("bf16", "fp16"):
        return _AsIs
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    kind = "cuda" if device == "gpu" else "cpu"
    return lambda: torch.autocast(kind, dtype=dtype)


class _AsIs(object):
    """No autocast (contextlib.nullcontext is Python 3.7+)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _compile(torch, model, mode, device):
    """The model torch.compile'd in `mode` ("none": as it is)."""
    if mode == "none":
        return model
    # Inductor builds C++ for the CPU, and Triton builds its GPU kernel
    # launchers with a C compiler: without one the first iteration would
    # fail deep inside them.
    if device == "cpu":
        names, what = (os.environ.get("CXX"), "g++", "c++", "clang++"), \
            "a C++ compiler (g++) for inductor's CPU code"
    else:
        names, what = (os.environ.get("CC"), "gcc", "cc", "clang"), \
            "a C compiler (gcc) for Triton's kernel launchers"
    if not any(name and shutil.which(name) for name in names):
        raise Unsupported("torch.compile needs {}; none is on PATH".format(
            what))
    # Both compile their code against Python.h (inductor's kernel bindings,
    # Triton's launchers): Debian's python3 ships it apart (libpython3.X-dev).
    headers = sysconfig.get_path("include")
    if not os.path.exists(os.path.join(headers, "Python.h")):
        raise Unsupported("torch.compile needs Python's C headers; there is "
                          "no Python.h in {}".format(headers))
    return torch.compile(model, mode=None if mode == "default" else mode)


def is_out_of_memory(exc):
    """The GPU ran out ("CUDA out of memory. Tried to allocate ..."); a CPU
    allocation failure ("DefaultCPUAllocator: can't allocate memory") is an
    error (harness.frameworks: is_out_of_memory). Reads the message only:
    torch may be what failed to import."""
    return device_out_of_memory(exc)


class Session(backends.Session):
    def __init__(self, network, model, inputs, labels, device,
                 precision="default", compile_mode="none"):
        torch = _torch()
        super(Session, self).__init__(network, model, inputs, labels)
        self.device = device
        self._forward = _compile(torch, model, compile_mode, device)
        self._autocast = _autocast(torch, precision, device)
        # fp16 gradients underflow without scaling; bf16 has FP32's range.
        self._scaler = (torch.amp.GradScaler("cuda" if device == "gpu"
                                             else "cpu")
                        if precision == "fp16" else None)
        self.loss_scaling = ("dynamic (torch.amp.GradScaler)"
                             if self._scaler is not None else None)
        self.parameters = count_parameters(model)
        self.attention = backends.attention_of(network,
                                                transformer.ATTENTION)
        self.optimizer = torch.optim.SGD(model.parameters(),
                                         lr=network.learning_rate,
                                         momentum=network.momentum)
        self.criterion = torch.nn.CrossEntropyLoss()
        self._sync = (torch.cuda.synchronize if device == "gpu"
                      else (lambda: None))

    def _loss(self):
        out = self._forward(self.inputs)
        if out.dim() == 3:  # (batch, steps, vocab): one prediction per token
            out = out.reshape(-1, out.shape[-1])
        return self.criterion(out, self.labels.reshape(-1))

    def step(self):
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            loss = self._loss()
        if self._scaler is None:
            loss.backward()
            self.optimizer.step()
        else:
            self._scaler.scale(loss).backward()
            self._scaler.step(self.optimizer)
            self._scaler.update()
        self._sync()
        return loss.item()

    def output_shape(self):
        torch = _torch()
        with torch.no_grad():
            return tuple(self.model(self.inputs).shape[1:])


def _device(device):
    return _torch().device("cuda" if device == "gpu" else "cpu")


def batch_arrays(network, batch_size, device, seed, batch=None):
    """The mini-batch (inputs, labels) as tensors on `device`: `batch` (a
    harness.data.batches.Batch) when given, else drawn from `seed` by a
    generator of its own."""
    torch = _torch()
    dev = _device(device)
    if batch is not None:
        dtype = torch.int64 if network.input_dtype == "int64" else torch.float32
        inputs = torch.tensor(batch.inputs, dtype=dtype).reshape(
            batch.input_shape).to(dev)
        labels = torch.tensor(batch.labels, dtype=torch.int64).reshape(
            batch.label_shape).to(dev)
        return inputs, labels
    shape = (batch_size,) + tuple(network.input_shape)
    generator = torch.Generator(device=dev)
    generator.manual_seed(seed)
    if network.input_dtype == "int64":
        inputs = torch.randint(0, network.classes, shape, device=dev,
                               generator=generator)
        labels = torch.randint(0, network.classes, shape, device=dev,
                               generator=generator)
    else:
        inputs = torch.randn(shape, device=dev, generator=generator)
        labels = torch.randint(0, network.classes, (batch_size,),
                               device=dev, generator=generator)
    return inputs, labels


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode=None):
    torch = _torch()
    _set_math(torch, precision, device)
    model = build_model(network, batch_size, device, seed).to(_device(device))
    model.train()
    inputs, labels = batch_arrays(network, batch_size, device, seed, batch)
    return Session(network, model, inputs, labels, device, precision,
                   backends.compile_mode_or_default(compile_mode,
                                                    CAPABILITIES))
