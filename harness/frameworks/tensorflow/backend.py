"""TensorFlow backend: a Keras functional model built from harness.networks,
trained by a compiled train step.

Why this is long: it is one framework's translation of every layer kind
of the ten networks plus its training session; split, one translation would
be scattered over files.

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

from ... import cudalibs
from ... import networks as nets
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory

NAME = "tensorflow"
DEVICES = ("cpu", "gpu")
PRECISIONS = ("default", "fp32", "tf32", "bf16", "fp16")
COMPILE_MODES = ("function", "xla", "none")


def _tf():
    # Imported here so that `harness.frameworks` never loads a framework the
    # cell does not use, and so that thread variables set by harness.threads
    # are in place before TensorFlow reads them.
    import tensorflow as tf
    return tf


def _np():
    # numpy comes with TensorFlow; imported lazily for the same reason.
    import numpy
    return numpy


def data_format(device):
    """Keras data format for `device`: channels_first (NCHW) on the GPU,
    channels_last (NHWC) on the CPU, where TensorFlow's convolutions and
    pools have no NCHW kernels."""
    return "channels_first" if device == "gpu" else "channels_last"


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
    missing = [k for k in ("cuda", "cudnn", "nccl") if k not in found]
    if missing:
        loaded, reasons = cudalibs.library_versions()
        for key in missing:
            found[key] = loaded[key]
            sources[key] = reasons[key]
    return found, sources


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


def _seed(tf, seed):
    set_all = getattr(tf.keras.utils, "set_random_seed", None)
    if set_all is not None:
        # Keras 3 initializers draw from Python's and Keras' own generators,
        # which only this call seeds along with TensorFlow's.
        set_all(seed)
    else:
        import random
        random.seed(seed)
        _np().random.seed(seed)
        tf.compat.v1.set_random_seed(seed)


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


# --- translation -------------------------------------------------------------

def same_padding(size, kernel, stride):
    """(before, after) that TensorFlow's SAME padding adds on one axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv_padding(in_hw, kernel, stride, pad):
    """How to reproduce the description's explicit (before, after) padding:
    ("same" | "valid", zero-padding to add first or None). SAME is one fused
    op, so it is used whenever it pads exactly as described."""
    pad = tuple(pad)
    if pad == (0, 0):
        return "valid", None
    if all(same_padding(n, kernel, stride) == pad for n in in_hw):
        return "same", None
    # Keras' own ResNet50 does the same: ZeroPadding2D, then a VALID conv.
    return "valid", pad


def pool_padding(in_hw, kernel, stride):
    """Pooling in ceil mode (harness.networks): the last window may run off
    the bottom/right edge. TensorFlow's SAME pooling does exactly that, max
    over in-bounds values and averages divided by the in-bounds count, when
    it pads nothing before; then "same", else None (a _CeilPool layer)."""
    for n in in_hw:
        out = nets._pool_out(n, kernel, stride)
        if -(-n // stride) != out or same_padding(n, kernel, stride)[0] != 0:
            return None
    return "same"


def _initializers():
    return {"kernel_initializer": "glorot_uniform",
            "bias_initializer": "zeros"}


def _spatial(shape):
    return shape[1:]


def _build(tf, resolved_layers, x, fmt):
    # Why this is long: one branch per layer kind, read as one table of
    # Keras equivalents.
    layers = tf.keras.layers
    channel_axis = 1 if fmt == "channels_first" else -1
    for r in resolved_layers:
        layer, kind = r.layer, type(r.layer)
        if kind is nets.Dense:
            x = layers.Dense(layer.units, activation=layer.activation,
                             **_initializers())(x)
        elif kind is nets.TimeDense:
            # Dense acts on the last axis: one projection per time step.
            x = layers.Dense(layer.units, **_initializers())(x)
        elif kind is nets.Conv:
            padding, extra = conv_padding(_spatial(r.in_shape), layer.kernel,
                                          layer.stride, layer.pad)
            if extra is not None:
                x = layers.ZeroPadding2D((extra, extra), data_format=fmt)(x)
            x = layers.Conv2D(layer.filters, layer.kernel, layer.stride,
                              padding=padding, data_format=fmt,
                              use_bias=layer.bias,
                              activation=layer.activation,
                              **_initializers())(x)
        elif kind is nets.BatchNorm:
            axis = channel_axis if len(r.in_shape) == 3 else -1
            # Keras' momentum is the decay of the running averages, as in
            # the description.
            x = layers.BatchNormalization(axis=axis, momentum=layer.momentum,
                                          epsilon=layer.eps)(x)
            if layer.activation is not None:
                x = layers.Activation(layer.activation)(x)
        elif kind is nets.Activation:
            if layer.fn is not None:
                x = layers.Activation(layer.fn)(x)
        elif kind is nets.Pool:
            padding = pool_padding(_spatial(r.in_shape), layer.kernel,
                                   layer.stride)
            if padding is None:
                x = _CeilPool(layer.op, layer.kernel, layer.stride, fmt)(x)
            else:
                pool = (layers.MaxPooling2D if layer.op == "max"
                        else layers.AveragePooling2D)
                x = pool(layer.kernel, layer.stride, padding=padding,
                         data_format=fmt)(x)
        elif kind is nets.GlobalAvgPool:
            x = layers.GlobalAveragePooling2D(data_format=fmt)(x)
        elif kind is nets.Flatten:
            # Flattens in memory order (no transpose on NCHW); the weights
            # are random, so the order of the features does not matter.
            x = layers.Flatten()(x)
        elif kind is nets.Residual:
            body, shortcut = r.children
            out = _build(tf, body, x, fmt)
            skip = x if shortcut is None else _build(tf, shortcut, x, fmt)
            x = layers.Add()([out, skip])
            if layer.activation is not None:
                x = layers.Activation(layer.activation)(x)
        elif kind is nets.SubsamplePad:
            x = _SubsamplePad(layer.stride, layer.channels - r.in_shape[0],
                              fmt)(x)
        elif kind is nets.Embedding:
            x = layers.Embedding(
                layer.vocab, layer.dim,
                embeddings_initializer=tf.keras.initializers.RandomUniform(
                    -0.05, 0.05))(x)
        elif kind is nets.LSTM:
            for _ in range(layer.layers):
                # One bias vector per gate (parameter_count's convention);
                # Glorot for both kernels and a zero forget-gate bias, as
                # described, instead of Keras' orthogonal/unit-forget
                # defaults. These settings keep the cuDNN kernel on the GPU.
                x = layers.LSTM(layer.hidden, return_sequences=True,
                                recurrent_initializer="glorot_uniform",
                                unit_forget_bias=False,
                                **_initializers())(x)
        else:
            raise HarnessError("tensorflow backend cannot build {}".format(
                kind.__name__))
    return x


_CLASSES = {}


def _layer_classes():
    # Why this is long: the two custom Keras layers must be defined inside
    # one function, because subclassing a Keras layer imports TensorFlow.
    # Defined on first use: subclassing a Keras layer imports TensorFlow.
    if _CLASSES:
        return _CLASSES
    tf = _tf()

    class SubsamplePad(tf.keras.layers.Layer):
        """Option-A shortcut: every `stride`-th pixel, zero channels after."""

        def __init__(self, stride, extra_channels, fmt, **kwargs):
            super(SubsamplePad, self).__init__(**kwargs)
            self.stride = stride
            self.extra = extra_channels
            self.fmt = fmt

        def call(self, x):
            s = self.stride
            if self.fmt == "channels_first":
                x = x[:, :, ::s, ::s]
                paddings = [[0, 0], [0, self.extra], [0, 0], [0, 0]]
            else:
                x = x[:, ::s, ::s, :]
                paddings = [[0, 0], [0, 0], [0, 0], [0, self.extra]]
            return tf.pad(x, paddings)

    class CeilPool(tf.keras.layers.Layer):
        """Ceil-mode pooling where SAME would pad before the input: pad the
        bottom/right explicitly; max ignores the padding, average divides by
        the in-bounds count."""

        def __init__(self, op, kernel, stride, fmt, **kwargs):
            super(CeilPool, self).__init__(**kwargs)
            self.op = op
            self.kernel = kernel
            self.stride = stride
            self.fmt = fmt

        def _paddings(self, shape):
            first = 2 if self.fmt == "channels_first" else 1
            paddings = [[0, 0], [0, 0], [0, 0], [0, 0]]
            for axis in (first, first + 1):
                n = int(shape[axis])
                out = nets._pool_out(n, self.kernel, self.stride)
                paddings[axis][1] = (out - 1) * self.stride + self.kernel - n
            return paddings

        def _pool(self, x, op):
            fmt = "NCHW" if self.fmt == "channels_first" else "NHWC"
            return tf.nn.pool(x, [self.kernel] * 2, op, padding="VALID",
                              strides=[self.stride] * 2, data_format=fmt)

        def call(self, x):
            paddings = self._paddings(x.shape)
            if self.op == "max":
                return self._pool(tf.pad(x, paddings,
                                         constant_values=x.dtype.min), "MAX")
            window = float(self.kernel * self.kernel)
            sums = self._pool(tf.pad(x, paddings), "AVG") * window
            channel = (x[:, :1] if self.fmt == "channels_first"
                       else x[..., :1])
            counts = self._pool(tf.pad(tf.ones_like(channel), paddings),
                                "AVG") * window
            return sums / counts

    _CLASSES.update(SubsamplePad=SubsamplePad, CeilPool=CeilPool)
    return _CLASSES


def _SubsamplePad(*args):
    return _layer_classes()["SubsamplePad"](*args)


def _CeilPool(*args):
    return _layer_classes()["CeilPool"](*args)


def input_shape(network, fmt):
    """Per-sample input shape in `fmt` (the description is channels-first)."""
    shape = tuple(network.input_shape)
    if len(shape) == 3 and fmt == "channels_last":
        return shape[1:] + shape[:1]
    return shape


def build_model(network, fmt="channels_last"):
    """The network as a Keras functional model taking inputs in `fmt`
    (see data_format(device) and input_shape()), initialised as described:
    Glorot-uniform weights, zero biases, embeddings uniform(-0.05, 0.05).
    Create it under a distribution strategy's scope to replicate it."""
    tf = _tf()
    dtype = "int32" if network.input_dtype == "int64" else "float32"
    inputs = tf.keras.Input(shape=input_shape(network, fmt), dtype=dtype)
    outputs = _build(tf, nets.resolve(network), inputs, fmt)
    return tf.keras.Model(inputs, outputs, name=network.name.replace("-", "_"))


def make_optimizer(network):
    """Plain SGD with the network's learning rate and momentum. Keras'
    momentum form (v = m v - lr g; w += v) equals PyTorch's for a constant
    learning rate."""
    return _tf().keras.optimizers.SGD(learning_rate=network.learning_rate,
                                      momentum=network.momentum)


def loss(labels, logits):
    """Mean softmax cross-entropy over samples, or over tokens when logits
    are (batch, steps, classes)."""
    tf = _tf()
    # Mixed precision computes the logits in bf16/fp16; the softmax and its
    # mean are taken in float32 (a no-op cast otherwise).
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32)))


def parameter_count(model):
    return sum(int(_np().prod(v.shape.as_list()))
               for v in model.trainable_variables)


# --- training ------------------------------------------------------------------

def _train_step(tf, model, optimizer, mode):
    scaled = hasattr(optimizer, "scale_loss") or hasattr(optimizer,
                                                        "get_scaled_loss")

    def step(inputs, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(inputs, training=True))
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
        self.parameters = parameter_count(model)
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


def batch_arrays(network, batch, fmt):
    """numpy (inputs, labels) of a harness.data.Batch in `fmt`, with the
    dtypes the model takes."""
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


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode="function"):
    tf = _tf()
    _set_math(tf, precision, device)
    # Keras initialisers and tf.random draw from global generators that
    # every call advances: seeding here, not only in configure, gives each
    # prepare with one seed the same weights and batch.
    _seed(tf, seed)
    fmt = data_format(device)
    placement = "/GPU:0" if device == "gpu" else "/CPU:0"
    with tf.device(placement):
        model = build_model(network, fmt)
        if batch is None:
            shape = (batch_size,) + input_shape(network, fmt)
            if network.input_dtype == "int64":
                inputs = tf.random.uniform(shape, 0, network.classes,
                                           dtype=tf.int32, seed=seed)
                labels = tf.random.uniform(shape, 0, network.classes,
                                           dtype=tf.int32, seed=seed + 1)
            else:
                inputs = tf.random.normal(shape, seed=seed)
                labels = tf.random.uniform((batch_size,), 0, network.classes,
                                           dtype=tf.int32, seed=seed + 1)
        else:
            arrays = batch_arrays(network, batch, fmt)
            inputs, labels = (tf.identity(tf.constant(a)) for a in arrays)
    return Session(network, model, inputs, labels, device, precision,
                   compile_mode)
