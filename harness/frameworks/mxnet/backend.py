"""MXNet backend: Gluon HybridBlocks built from harness.networks.

Its translation of every layer kind is in layers.py beside it (re-exported
here); this module holds the versions, threads, precision and the training
session.

The fast path an MXNet expert would time: the network and the loss
hybridized with static memory and shapes (one cached graph per block),
gluon.Trainer with SGD, and the iteration ended by mx.nd.waitall() because
the engine runs everything asynchronously. On GPU, cuDNN autotuning is on
(MXNET_CUDNN_AUTOTUNE_DEFAULT=1, as the paper's scripts set it). kvstore is
off for a single device; 'device' is the multi-GPU choice (convergence mode).

Threads: MXNet reads its thread settings from the environment when the
library loads (harness.threads sets OMP_NUM_THREADS and MXNET_OMP_MAX_THREADS
before the import; configure() keeps one engine worker). MXNet has no getter
for the OpenMP count its operators use; effective_threads() recomputes it
with MXNet's own rule (src/engine/openmp.cc) from those variables and the
OpenMP runtime MXNet loaded.

Compilation (the cell's `compile`): "hybridize" (the default, above) or
"none" (imperative Gluon, op by op). Precision (the cell's `precision`):
MXNet 1.9 has AMP (mxnet.contrib.amp) for bfloat16 on the CPU (oneDNN) and
float16 on the GPU (with AMP's dynamic loss scaling); amp.init() rewrites
the operator namespaces before the model is built, once per process.
"fp32" on the GPU sets NVIDIA_TF32_OVERRIDE=0, NVIDIA's switch that keeps
cuBLAS and cuDNN from TF32, read when MXNet creates their handles at the
first GPU operator of the model; MXNet itself has no TF32 switch, so "tf32"
is not offered and "default" on the GPU does not report its math mode.
"""
import ctypes
import os

from ...gpu import cudalibs
from ... import networks as nets
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory
from . import transformer
# The translation lives beside this module; its public names are the
# backend's.
from .layers import (  # noqa: F401
    NAME, TRANSLATORS, build_model, context, count_parameters, hybridize,
    loss_block)
from .load import _mx
# What a group worker frees between cells (harness.worker).
from .memory import release_memory  # noqa: F401

DEVICES = ("cpu", "gpu")
CAPABILITIES = backends.capabilities(
    precisions=("default", "fp32", "bf16", "fp16"),
    compile_modes=("hybridize", "none"),
    not_offered={
        "tf32": "MXNet 1.9 has no TF32 switch (on Ampere and newer cuDNN "
                "may use TF32 by default: precision default; fp32 keeps it "
                "off)"})
TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"

# The compile-time features a result records (mx.runtime.Features()).
BUILD_FEATURES = ("CUDA", "CUDNN", "NCCL", "MKLDNN", "OPENMP", "BLAS_OPEN",
                  "BLAS_MKL", "DIST_KVSTORE")


def versions(device):
    mx = _mx()
    features = mx.runtime.Features()
    info = {"framework_version": mx.__version__, "cuda": None, "cudnn": None,
            "nccl": None,
            "framework_build": dict((name, features.is_enabled(name))
                                    for name in BUILD_FEATURES
                                    if name in features)}
    return backends.with_library_versions(
        info, device,
        lambda: cudalibs.library_versions(fallback=_library_path(mx)))


def _library_path(mx):
    """Where libmxnet.so was loaded from (asked when CUDA is linked in)."""
    return getattr(getattr(mx.base, "_LIB", None), "_name", None)


def configure(threads, device, seed):
    if device == "gpu":
        # Read when the convolution operators are created; set before the
        # import so that no operator sees the library default.
        os.environ["MXNET_CUDNN_AUTOTUNE_DEFAULT"] = "1"
    # harness.threads has set one engine worker with OpenMP teams of
    # `threads` before this import.
    mx = _mx()
    if device == "gpu":
        _check_gpu(mx)
    # Thread pools are fixed by the environment at import (harness.threads);
    # MXSetNumOMPThreads would only change the calling Python thread, which
    # runs no operators, so it is deliberately not called.
    mx.random.seed(seed)


def gpu_count():
    return _mx().context.num_gpus()


def math_mode(device):
    """FP32 layers on the CPU are FP32; on the GPU only NVIDIA's override
    says (MXNet has no switch to read)."""
    if device != "gpu" or os.environ.get(TF32_OVERRIDE) == "0":
        return {"matmul": "fp32", "conv": "fp32"}
    return None


def _set_math(mx, precision, device, network, compile_mode):
    """AMP for bf16 (CPU) and fp16 (GPU); TF32 off for strict fp32."""
    if precision == "fp32" and device == "gpu":
        os.environ[TF32_OVERRIDE] = "0"
    if precision == "bf16" and device == "gpu":
        raise Unsupported("MXNet 1.9's AMP casts to bfloat16 with oneDNN "
                          "operators, on the CPU only")
    if precision == "fp16" and device != "gpu":
        raise Unsupported("MXNet 1.9's AMP float16 lists are CUDA "
                          "operators; on the CPU it offers bfloat16 (bf16)")
    if precision in ("bf16", "fp16") and compile_mode == "hybridize" and \
            any(type(r.layer) is nets.LSTM for r in nets.resolve(network)):
        # amp's wrapped symbol.zeros gets no inputs from the LSTM's
        # begin_state when traced (TypeError inside mxnet.contrib.amp).
        raise Unsupported("MXNet 1.9's AMP breaks Gluon's LSTM when "
                          "hybridized; --compile none runs it imperatively")
    if precision in ("bf16", "fp16"):
        from mxnet.contrib import amp
        amp.init(target_dtype="bfloat16" if precision == "bf16"
                 else "float16")
        return amp
    return None


def _check_gpu(mx):
    if not mx.runtime.Features().is_enabled("CUDA"):
        raise Unsupported("this MXNet {} build has no CUDA support (a CPU "
                          "wheel)".format(mx.__version__))
    if gpu_count() < 1:
        raise HarnessError("device gpu requested but MXNet sees no GPU")
    try:
        mx.nd.ones((1,), ctx=mx.gpu(0)).asnumpy()
    except mx.base.MXNetError as exc:
        # MXNet 1.9.1 wheels carry kernels for sm_50..sm_86 and no PTX, so
        # a newer GPU fails on its first kernel.
        if "no kernel image" in str(exc):
            major, minor = _compute_capability(mx)
            raise Unsupported("MXNet {} has no kernels for this GPU (sm_{}{})"
                              .format(mx.__version__, major, minor))
        raise


def _compute_capability(mx):
    try:
        cc = mx.util.get_cuda_compute_capability(mx.gpu(0))
        return cc // 10, cc % 10
    except Exception:  # best effort, only for the message
        return "?", "?"


def _openmp():
    """The OpenMP runtime MXNet loaded (ctypes.CDLL), or None."""
    paths = cudalibs.loaded_libraries()
    for prefix in ("libgomp", "libiomp5", "libomp"):
        path = cudalibs.find_loaded(prefix, paths)
        if path:
            return ctypes.CDLL(path)
    return None


def effective_threads():
    """The OpenMP thread count MXNet's CPU operators use, by MXNet's own rule
    (src/engine/openmp.cc): MXNET_OMP_MAX_THREADS if set; else, with
    OMP_NUM_THREADS set, the runtime's omp_get_max_threads(); else half the
    processors on x86. Engine worker threads (MXNET_CPU_WORKER_NTHREADS) are
    reported in the result's thread environment, not here."""
    _mx()
    limit = _int_env("MXNET_OMP_MAX_THREADS")
    if limit is not None:
        return limit
    omp = _openmp()
    if omp is None:
        return None
    if _int_env("OMP_NUM_THREADS") is not None:
        return int(omp.omp_get_max_threads())
    procs = int(omp.omp_get_num_procs())
    if os.uname()[4] in ("x86_64", "i386", "i686", "AMD64"):
        procs >>= 1
    return max(procs, 1)


def _int_env(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def is_out_of_memory(exc):
    """The GPU ran out ("cudaMalloc retry failed: out of memory"); "Failed
    to allocate CPU Memory" is an error (harness.frameworks:
    is_out_of_memory)."""
    return device_out_of_memory(exc)


# --- training ------------------------------------------------------------------

class Session(backends.Session):
    def __init__(self, network, model, inputs, labels, batch_size,
                 compile_mode="hybridize", amp=None, precision="default"):
        mx = _mx()
        if compile_mode == "hybridize":
            model = hybridize(model)
        super(Session, self).__init__(network, model, inputs, labels)
        self.batch_size = batch_size
        self.parameters = count_parameters(model)
        self.attention = backends.attention_of(network,
                                                transformer.ATTENTION)
        self.loss = mx.gluon.loss.SoftmaxCrossEntropyLoss(axis=-1)
        if compile_mode == "hybridize":
            self.loss = hybridize(self.loss)
        # kvstore=None: one device needs no parameter server; 'device' is
        # the multi-GPU setting.
        self.trainer = mx.gluon.Trainer(
            model.collect_params(), "sgd",
            {"learning_rate": network.learning_rate,
             "momentum": network.momentum},
            kvstore=None)
        # fp16: AMP's dynamic loss scaler, unscaled again in trainer.step.
        self._amp = amp if precision == "fp16" else None
        self.loss_scaling = None
        if self._amp is not None:
            amp.init_trainer(self.trainer)
            self.loss_scaling = "dynamic (mxnet.contrib.amp)"
        self._autograd = mx.autograd
        self._waitall = mx.nd.waitall

    def step(self):
        with self._autograd.record():
            loss = self.loss(self.model(self.inputs), self.labels)
        if self._amp is None:
            loss.backward()
        else:
            with self._amp.scale_loss(loss, self.trainer) as scaled:
                self._autograd.backward(scaled)
        mean = loss.mean()
        self.trainer.step(self.batch_size)
        # The engine is asynchronous: the iteration ends when the update too
        # has run, not when the loss alone is ready.
        self._waitall()
        return float(mean.asscalar())

    def output_shape(self):
        return tuple(self.model(self.inputs).shape[1:])


def _random_batch(mx, network, batch_size, ctx):
    shape = (batch_size,) + tuple(network.input_shape)
    if network.input_dtype == "int64":
        # Token ids travel as float32 (exact below 2**24), the type Gluon's
        # Embedding and loss take.
        inputs = mx.nd.random.randint(0, network.classes, shape=shape,
                                      ctx=ctx).astype("float32")
        labels = mx.nd.random.randint(0, network.classes, shape=shape,
                                      ctx=ctx).astype("float32")
    else:
        inputs = mx.nd.random.normal(0, 1, shape=shape, ctx=ctx)
        labels = mx.nd.random.randint(0, network.classes, shape=(batch_size,),
                                      ctx=ctx).astype("float32")
    return inputs, labels


def _given_batch(mx, network, batch, ctx):
    import numpy  # MXNet's own dependency
    dtype = numpy.int64 if network.input_dtype == "int64" else numpy.float32
    inputs = numpy.frombuffer(batch.inputs, dtype=dtype).reshape(
        batch.input_shape)
    labels = numpy.frombuffer(batch.labels, dtype=numpy.int64).reshape(
        batch.label_shape)
    return (mx.nd.array(inputs, ctx=ctx, dtype="float32"),
            mx.nd.array(labels, ctx=ctx, dtype="float32"))


def batch_arrays(network, batch_size, device, seed, batch=None):
    """The mini-batch (inputs, labels) as NDArrays on `device`: `batch` (a
    harness.data.batches.Batch) when given, else random. MXNet's weights are
    drawn when the model is built, from the generator build_model(..., seed)
    seeded: the random batch continues that generator (seeding it again
    here would draw the batch the weights were drawn from)."""
    mx = _mx()
    ctx = context(mx, device)
    if batch is None:
        return _random_batch(mx, network, batch_size, ctx)
    return _given_batch(mx, network, batch, ctx)


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode=None):
    mx = _mx()
    compile_mode = backends.compile_mode_or_default(compile_mode,
                                                    CAPABILITIES)
    amp = _set_math(mx, precision, device, network, compile_mode)
    model = build_model(network, batch_size, device, seed)
    inputs, labels = batch_arrays(network, batch_size, device, seed, batch)
    if batch is not None:
        batch_size = batch.input_shape[0]
    mx.nd.waitall()
    return Session(network, model, inputs, labels, batch_size, compile_mode,
                   amp, precision)
