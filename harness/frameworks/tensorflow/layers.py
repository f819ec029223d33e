"""The TensorFlow backend's translation of harness.networks into Keras
layers: paddings, the layer classes Keras lacks, the model, its optimizer,
loss and parameter count (the backend module's docstring says which Keras
versions it serves)."""
from ... import networks as nets
from .. import draws
from ...errors import HarnessError
from . import transformer
from .load import _np, _tf


def data_format(device):
    """Keras data format for `device`: channels_first (NCHW) on the GPU,
    channels_last (NHWC) on the CPU, where TensorFlow's convolutions and
    pools have no NCHW kernels."""
    return "channels_first" if device == "gpu" else "channels_last"


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


# --- translation -------------------------------------------------------------

def same_padding(size, kernel, stride):
    """(before, after) that TensorFlow's SAME padding adds on one axis."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def keras_padding(in_hw, kernel, stride, pad):
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


# The root key of the network keras_model() is building: each initializer
# takes the next child key, in the order the layers are translated.
_KEYS = []


def _initializers():
    return {"kernel_initializer": _drawn(), "bias_initializer": "zeros"}


def _drawn(limit=None):
    """An initializer drawing with numpy (harness.frameworks.draws) from
    the next layer key: Glorot-uniform with Keras' fans (those of the
    description), or uniform(-limit, limit)."""
    return _layer_classes()["Drawn"](_KEYS[-1].spawn(1)[0], limit)


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
            padding, extra = keras_padding(_spatial(r.in_shape), layer.kernel,
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
                embeddings_initializer=_drawn(0.05))(x)
        elif kind is nets.LSTM:
            for _ in range(layer.layers):
                # One bias vector per gate (parameter_count's convention);
                # Glorot for both kernels and a zero forget-gate bias, as
                # described, instead of Keras' orthogonal/unit-forget
                # defaults. These settings keep the cuDNN kernel on the GPU.
                x = layers.LSTM(layer.hidden, return_sequences=True,
                                recurrent_initializer=_drawn(),
                                unit_forget_bias=False,
                                **_initializers())(x)
        elif kind is nets.Transformer:
            x = transformer.layer(r)(x)
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

    _CLASSES.update(SubsamplePad=SubsamplePad, CeilPool=CeilPool,
                    Drawn=_drawn_class(tf))
    return _CLASSES


def _drawn_class(tf):
    class Drawn(tf.keras.initializers.Initializer):
        """Initial values drawn on the host with numpy: TensorFlow's own
        draw (stateless Philox, then a scale and a shift) made fcn5's build
        the slowest but one (harness.frameworks.draws)."""

        def __init__(self, key, limit=None):
            self.key = key
            self.limit = limit

        def __call__(self, shape, dtype=None, **kwargs):
            shape = tuple(int(d) for d in shape)
            if self.limit is not None:
                values = draws.uniform(self.key, shape, self.limit)
            else:
                # Keras' fans: the last two axes times the receptive field.
                receptive = 1
                for d in shape[:-2]:
                    receptive *= d
                values = draws.glorot(self.key, shape,
                                      shape[-2] * receptive,
                                      shape[-1] * receptive)
            return _host_tensor(tf, values, dtype)

        def get_config(self):
            return {"limit": self.limit}

    return Drawn


def _host_tensor(tf, values, dtype):
    """`values` (aligned float32) as a tensor: through DLPack without a copy
    (TensorFlow 2.2 and newer), else converted."""
    dlpack = getattr(getattr(tf, "experimental", None), "dlpack", None)
    if dlpack is not None and hasattr(values, "__dlpack__"):
        tensor = dlpack.from_dlpack(values.__dlpack__())
    else:
        tensor = tf.convert_to_tensor(values)
    if dtype is not None and tf.as_dtype(dtype) != tf.float32:
        tensor = tf.cast(tensor, dtype)
    return tensor


def _SubsamplePad(*args):
    return _layer_classes()["SubsamplePad"](*args)


def _CeilPool(*args):
    return _layer_classes()["CeilPool"](*args)


def input_shape_in(network, fmt):
    """Per-sample input shape in `fmt` (the description is channels-first)."""
    shape = tuple(network.input_shape)
    if len(shape) == 3 and fmt == "channels_last":
        return shape[1:] + shape[:1]
    return shape


def build_model(network, batch_size, device, seed):
    """The network as a Keras functional model taking inputs in
    data_format(device) (see input_shape_in()), initialised as described
    from `seed`: Glorot-uniform weights, zero biases, embeddings
    uniform(-0.05, 0.05), drawn with numpy (harness.frameworks.draws). Create it under a distribution strategy's scope to
    replicate it, under tf.device to place it."""
    return keras_model(network, data_format(device), seed)


def keras_model(network, fmt, seed):
    """build_model() in layout `fmt` (tests build both on one device)."""
    tf = _tf()
    # Keras initialisers draw from global generators that every call
    # advances: seeded here, each build with one seed has the same weights.
    _seed(tf, seed)
    dtype = "int32" if network.input_dtype == "int64" else "float32"
    inputs = tf.keras.Input(shape=input_shape_in(network, fmt), dtype=dtype)
    _KEYS.append(draws.keys(seed))
    try:
        outputs = _build(tf, nets.resolve(network), inputs, fmt)
    finally:
        _KEYS.pop()
    # Keras scope names take neither "-" nor a transformer's "@STEPS".
    name = network.name.replace("-", "_").replace("@", "_")
    return tf.keras.Model(inputs, outputs, name=name)


def make_optimizer(network):
    """Plain SGD with the network's learning rate and momentum. Keras'
    momentum form (v = m v - lr g; w += v) equals PyTorch's for a constant
    learning rate."""
    return _tf().keras.optimizers.SGD(learning_rate=network.learning_rate,
                                      momentum=network.momentum)


def loss(logits, labels):
    """Mean softmax cross-entropy over samples, or over tokens when logits
    are (batch, steps, classes)."""
    tf = _tf()
    # Mixed precision computes the logits in bf16/fp16; the softmax and its
    # mean are taken in float32 (a no-op cast otherwise).
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32)))


def count_parameters(model):
    return sum(int(_np().prod(v.shape.as_list()))
               for v in model.trainable_variables)
