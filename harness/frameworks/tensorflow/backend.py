"""TensorFlow backend: a Keras functional model built from harness.networks,
trained by a compiled train step.

Its translation of every layer kind is in layers.py beside it (re-exported
here); this module holds the versions, threads, precision and the training
session.

The fast path a TensorFlow expert would time for these models (the "custom
training loop" of TensorFlow's guides): the model called inside a
`tf.function` with a GradientTape and the Keras SGD optimizer, so that one
iteration is one call into a compiled graph; the mini-batch made once, on the
device; NHWC on the CPU (TensorFlow's CPU convolutions only take NHWC) and
NCHW on the GPU (cuDNN's native layout).

Compilation (the cell's `compile`): "function" (the default: a tf.function
graph, XLA off as TensorFlow ships), "xla" (the same step with
jit_compile=True) or "none" (eager, op by op). Precision (the cell's
`precision`): "default" leaves TensorFlow's TF32 switch as shipped (on for
matrix products and convolutions since 2.4), "fp32" switches it off and
reads it back, "tf32" on (GPU only), "bf16" and "fp16" set the Keras
mixed-precision policy (mixed_bfloat16, mixed_float16: float32 variables,
logits cast to float32 for the loss) before the model is built, fp16 with
Keras' dynamic LossScaleOptimizer. TensorFlow 1.15 (the `tf1` profile)
predates TF32 and the stable mixed-precision API: fp32 and default only.

Layers are Keras layers (tf.keras), which exist with the same arguments from
TensorFlow 1.15 (Keras 2.2) to 2.16+ (Keras 3), so one translation serves both
the current TensorFlow and the `tf1` profile. On TensorFlow 1.x, configure()
switches on 2.x behaviour (eager execution with tf.function); see
docs/backends.md for what was verified on which version.
"""
import os

from ...gpu import cudalibs
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory
from . import transformer
# The translation lives beside this module; its public names are the
# backend's.
from .layers import (  # noqa: F401
    _seed, build_model, count_parameters, data_format, input_shape_in,
    keras_model, keras_padding, loss, make_optimizer, pool_padding,
    same_padding)
from .load import _np, _tf
# What a group worker frees between cells (harness.worker).
from .memory import release_memory  # noqa: F401

NAME = "tensorflow"
DEVICES = ("cpu", "gpu")
CAPABILITIES = backends.capabilities(
    precisions=("default", "fp32", "tf32", "bf16", "fp16"),
    compile_modes=("function", "xla", "none"))


def _major(tf):
    return int(tf.__version__.split(".")[0])


# --- versions, threads, devices ------------------------------------------------

def versions(device):
    tf = _tf()
    info = {"framework_version": tf.__version__, "cuda": None, "cudnn": None,
            "nccl": None, "tf_data_format": data_format(device),
            "keras_version": _keras_version(tf)}
    return backends.with_library_versions(info, device,
                                          lambda: _cuda_versions(tf))


def _cuda_versions(tf):
    """CUDA and cuDNN as TensorFlow reports them (get_build_info, 2.3 and
    newer); what it does not report (NCCL always, everything on 1.15, which
    has no build info on Linux) is read off the libraries it has loaded."""
    found, sources = {}, {}
    get = getattr(tf.sysconfig, "get_build_info", None)
    build = dict(get()) if get is not None else {}
    for key in ("cuda", "cudnn"):
        value = build.get(key + "_version")
        if value:
            found[key] = str(value)
            sources[key] = "tf.sysconfig.get_build_info()"
    return cudalibs.fill_from_loaded(found, sources)


def math_mode(device):
    """Whether FP32 matrix products and convolutions may run as TF32 on
    tensor cores: TensorFlow allows it for both by default since 2.4."""
    if device != "gpu":
        return {"matmul": "fp32", "conv": "fp32"}
    tf = _tf()
    enabled = getattr(tf.config.experimental,
                      "tensor_float_32_execution_enabled", None)
    # TensorFlow < 2.4 predates TF32.
    mode = "tf32" if enabled is not None and enabled() else "fp32"
    return {"matmul": mode, "conv": mode}


def _set_math(tf, precision, device):
    """TF32 and the Keras mixed-precision policy for `precision`; strict
    fp32 is read back. Before the model is built: layers take the policy
    in force when they are made."""
    experimental = tf.config.experimental
    switch = getattr(experimental, "enable_tensor_float_32_execution", None)
    mixed = getattr(getattr(tf.keras, "mixed_precision", None),
                    "set_global_policy", None)
    if precision == "tf32" and device != "gpu":
        raise Unsupported("tf32 is a tensor-core format of NVIDIA GPUs "
                          "(Ampere and newer); TensorFlow has none on the CPU")
    if precision in ("fp32", "tf32") and switch is not None:
        switch(precision == "tf32")
        if precision == "fp32" and \
                experimental.tensor_float_32_execution_enabled():
            raise HarnessError("strict fp32: TensorFlow still allows TF32")
    elif precision == "tf32":
        raise Unsupported("TensorFlow {} predates TF32 (2.4 and newer)".format(
            tf.__version__))
    if precision in ("bf16", "fp16"):
        if mixed is None:
            raise Unsupported("TensorFlow {} has no stable mixed-precision "
                              "API (tf.keras.mixed_precision, 2.4 and "
                              "newer)".format(tf.__version__))
        if precision == "fp16" and device != "gpu":
            backends.check_cpu_fp16("TensorFlow")
    if mixed is not None:
        # Set every time: a policy left by an earlier prepare in this
        # process must not leak into a float32 model.
        mixed({"bf16": "mixed_bfloat16",
               "fp16": "mixed_float16"}.get(precision, "float32"))


def _keras_version(tf):
    version = getattr(tf.keras, "__version__", None)
    if version is None:  # Keras 3 behind tf.keras keeps it on `keras`
        try:
            import keras
            version = keras.__version__
        except ImportError:
            version = None
    return version


def configure(threads, device, seed):
    tf = _tf()
    if _major(tf) == 1:
        # tf.function, GradientTape and the eager context below are 2.x
        # behaviour; TensorFlow 1.15 has it behind this switch, which must be
        # thrown before the first op.
        tf.compat.v1.enable_v2_behavior()
    if threads is not None:
        # Must run before the runtime starts (the first op); the variables
        # harness.threads set cover oneDNN/OpenMP pools besides these two.
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    if device == "gpu" and not _gpus(tf):
        raise HarnessError("device gpu requested but TensorFlow {} sees no GPU "
                           "(tensorflow-cpu, or no CUDA driver)".format(
                               tf.__version__))
    _seed(tf, seed)


def _gpus(tf):
    listing = getattr(tf.config, "list_physical_devices", None)
    if listing is None:  # TensorFlow < 2.1
        listing = tf.config.experimental.list_physical_devices
    return listing("GPU")


def gpu_count():
    return len(_gpus(_tf()))


def effective_threads():
    tf = _tf()
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    if threads:
        return threads
    # 0 means "TensorFlow decides": one thread per schedulable CPU.
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def is_out_of_memory(exc):
    """The GPU ran out ("OOM when allocating tensor ... on
    /device:GPU:0 by allocator GPU_0_bfc"); the same error from the CPU
    allocator ("by allocator cpu") is an error (harness.frameworks:
    is_out_of_memory). Reads the message only: TensorFlow may be what failed
    to import."""
    return device_out_of_memory(exc)


# --- training ------------------------------------------------------------------

def _train_step(tf, model, optimizer, mode):
    scaled = hasattr(optimizer, "scale_loss") or hasattr(optimizer,
                                                        "get_scaled_loss")

    def step(inputs, labels):
        with tf.GradientTape() as tape:
            value = loss(model(inputs, training=True), labels)
            target = _scaled_loss(optimizer, value) if scaled else value
        variables = model.trainable_variables
        gradients = tape.gradient(target, variables)
        if scaled and hasattr(optimizer, "get_unscaled_gradients"):
            # tf.keras 2.x; Keras 3's LossScaleOptimizer unscales in apply.
            gradients = optimizer.get_unscaled_gradients(gradients)
        optimizer.apply_gradients(zip(gradients, variables))
        return value

    if mode == "none":
        return step
    if mode == "function":
        return tf.function(step)
    # TensorFlow 2.5 renamed experimental_compile (1.15 to 2.4) to
    # jit_compile.
    for option in ("jit_compile", "experimental_compile"):
        try:
            return tf.function(step, **{option: True})
        except TypeError:
            continue
    raise Unsupported("compile xla needs TensorFlow 1.15 or newer "
                      "(XLA-compiled tf.function); this is {}".format(
                          tf.__version__))


def _scaled_loss(optimizer, value):
    scale = getattr(optimizer, "scale_loss", None)  # Keras 3
    return scale(value) if scale is not None else \
        optimizer.get_scaled_loss(value)


def _loss_scaled(tf, optimizer):
    """Keras' dynamic loss scaling around `optimizer` (fp16)."""
    keras_scaler = getattr(tf.keras.optimizers, "LossScaleOptimizer", None)
    if keras_scaler is None:  # tf.keras 2.x
        keras_scaler = tf.keras.mixed_precision.LossScaleOptimizer
    return keras_scaler(optimizer)


class Session(backends.Session):
    def __init__(self, network, model, inputs, labels, device,
                 precision="default", compile_mode="function"):
        tf = _tf()
        super(Session, self).__init__(network, model, inputs, labels)
        self.device = device
        self.parameters = count_parameters(model)
        self.attention = backends.attention_of(network,
                                                transformer.ATTENTION)
        self.optimizer = make_optimizer(network)
        self.loss_scaling = None
        if precision == "fp16":
            self.optimizer = _loss_scaled(tf, self.optimizer)
            self.loss_scaling = "dynamic (Keras LossScaleOptimizer)"
        build = getattr(self.optimizer, "build", None)
        if build is not None:
            # Keras >= 2.11 optimizers make their slots here rather than
            # inside the traced step.
            build(model.trainable_variables)
        self._step = _train_step(tf, model, self.optimizer, compile_mode)
        sync = getattr(getattr(tf.test, "experimental", None), "sync_devices",
                       None)
        # Reading the loss already waits for the step on the CPU; on the GPU
        # sync_devices (TensorFlow >= 2.12) also waits for the updates.
        self._sync = sync if device == "gpu" and sync else (lambda: None)

    def step(self):
        value = self._step(self.inputs, self.labels)
        self._sync()
        return float(value.numpy())

    def output_shape(self):
        return tuple(self.model(self.inputs, training=False).shape[1:])


def _to_layout(array, fmt):
    if array.ndim == 4 and fmt == "channels_last":
        return array.transpose(0, 2, 3, 1)
    return array


def _numpy_batch(network, batch, fmt):
    """numpy (inputs, labels) of a harness.data.batches.Batch in `fmt`, with
    the dtypes the model takes."""
    np = _np()
    dtype = np.int32 if network.input_dtype == "int64" else np.float32
    inputs = np.frombuffer(batch.inputs, dtype=_buffer_dtype(np, batch.inputs))
    inputs = inputs.reshape(batch.input_shape).astype(dtype)
    labels = np.frombuffer(batch.labels, dtype=_buffer_dtype(np, batch.labels))
    labels = labels.reshape(batch.label_shape).astype(np.int32)
    return np.ascontiguousarray(_to_layout(inputs, fmt)), labels


def _buffer_dtype(np, buffer):
    return {"f": np.float32, "d": np.float64, "q": np.int64,
            "l": np.int64}[buffer.typecode]


def _random_batch(tf, network, batch_size, fmt, seed):
    shape = (batch_size,) + input_shape_in(network, fmt)
    if network.input_dtype == "int64":
        inputs = tf.random.uniform(shape, 0, network.classes,
                                   dtype=tf.int32, seed=seed)
        labels = tf.random.uniform(shape, 0, network.classes,
                                   dtype=tf.int32, seed=seed + 1)
    else:
        inputs = tf.random.normal(shape, seed=seed)
        labels = tf.random.uniform((batch_size,), 0, network.classes,
                                   dtype=tf.int32, seed=seed + 1)
    return inputs, labels


def _placement(device):
    return "/GPU:0" if device == "gpu" else "/CPU:0"


def batch_arrays(network, batch_size, device, seed, batch=None):
    """The mini-batch (inputs, labels) as tensors on `device` in
    data_format(device): `batch` (a harness.data.batches.Batch) when given,
    else drawn from `seed`."""
    tf = _tf()
    fmt = data_format(device)
    with tf.device(_placement(device)):
        if batch is None:
            return _random_batch(tf, network, batch_size, fmt, seed)
        return tuple(tf.identity(tf.constant(a))
                     for a in _numpy_batch(network, batch, fmt))


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode=None):
    tf = _tf()
    _set_math(tf, precision, device)
    # build_model seeds the global generators that Keras' initialisers and
    # tf.random draw from: each prepare with one seed has the same weights
    # and batch.
    with tf.device(_placement(device)):
        model = build_model(network, batch_size, device, seed)
    inputs, labels = batch_arrays(network, batch_size, device, seed, batch)
    return Session(network, model, inputs, labels, device, precision,
                   backends.compile_mode_or_default(compile_mode,
                                                    CAPABILITIES))
