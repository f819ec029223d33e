"""The MXNet backend's translation of harness.networks into Gluon blocks:
one translator per layer kind, the blocks Gluon lacks, the model, its
parameter count and loss."""
import ctypes

from ... import networks as nets
from .. import backends, draws
from ...errors import HarnessError
from . import transformer
from .load import _mx

NAME = "mxnet"


# --- translation -------------------------------------------------------------

# The root key of the network build_model() is building: each initializer
# takes the next child key, in the order the layers are translated.
_KEYS = []


def _glorot():
    # Glorot-uniform, limit sqrt(6 / (fan_in + fan_out)), with MXNet's fans
    # (in x receptive field, out x receptive field; those of Xavier("uniform",
    # "avg", 3), which this replaced): the same numbers as the
    # description's.
    return _drawn()


def _drawn(limit=None):
    """An initializer drawing with numpy (harness.frameworks.draws), from
    the next layer key; uniform(-limit, limit) when `limit` is given."""
    return _block("Drawn")(_KEYS[-1].spawn(1)[0], limit)


def _host_view(mx, arr):
    """A writable numpy view of CPU NDArray `arr`'s memory, once what the
    engine has queued on it is done (MXNDArrayGetData: MXNet's C API), or
    None where there is none (another device or dtype)."""
    np = __import__("numpy")  # MXNet's own dependency
    if arr.context.device_type != "cpu" or arr.dtype != np.float32:
        return None
    arr.wait_to_read()
    pointer = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(
        arr.handle, ctypes.byref(pointer)))
    return np.ctypeslib.as_array(
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)),
        shape=arr.shape)


def _activation_blocks(name):
    return [] if name is None else [_mx().gluon.nn.Activation(name)]


def _dense(r, build):
    nn = _mx().gluon.nn
    layer = r.layer
    return [nn.Dense(layer.units, activation=layer.activation,
                     in_units=r.in_shape[0], weight_initializer=_glorot(),
                     bias_initializer="zeros")]


def _time_dense(r, build):
    nn = _mx().gluon.nn
    return [nn.Dense(r.layer.units, flatten=False, in_units=r.in_shape[1],
                     weight_initializer=_glorot(), bias_initializer="zeros")]


def _conv(r, build):
    nn = _mx().gluon.nn
    layer = r.layer
    before, after = layer.pad
    blocks = []
    if before != after:
        # Convolution pads symmetrically: the asymmetric (TensorFlow SAME)
        # case gets an explicit pad op on the spatial axes first.
        blocks.append(_block("Pad")(before, after))
        before = 0
    blocks.append(nn.Conv2D(layer.filters, layer.kernel, strides=layer.stride,
                            padding=before, in_channels=r.in_shape[0],
                            use_bias=layer.bias, activation=layer.activation,
                            weight_initializer=_glorot(),
                            bias_initializer="zeros"))
    return blocks


def _batch_norm(r, build):
    nn = _mx().gluon.nn
    layer = r.layer
    # MXNet's momentum is the decay of the running statistics, as in the
    # description.
    return [nn.BatchNorm(axis=1, momentum=layer.momentum, epsilon=layer.eps,
                         in_channels=r.in_shape[0])] + \
        _activation_blocks(layer.activation)


def _activation(r, build):
    return _activation_blocks(r.layer.fn)


def _pool(r, build):
    nn = _mx().gluon.nn
    layer = r.layer
    # ceil_mode is pooling_convention='full': the last window that runs off
    # the edge is kept; averages divide by the in-bounds count.
    if layer.op == "max":
        return [nn.MaxPool2D(layer.kernel, layer.stride, ceil_mode=True)]
    return [nn.AvgPool2D(layer.kernel, layer.stride, ceil_mode=True,
                         count_include_pad=False)]


def _global_avg_pool(r, build):
    nn = _mx().gluon.nn
    return [nn.GlobalAvgPool2D(), nn.Flatten()]


def _flatten(r, build):
    return [_mx().gluon.nn.Flatten()]


def _residual(r, build):
    body, shortcut = r.children
    return [_block("Residual")(build(body),
                               None if shortcut is None else build(shortcut),
                               r.layer.activation)]


def _subsample_pad(r, build):
    return [_block("SubsamplePad")(r.layer.stride,
                                   r.layer.channels - r.in_shape[0])]


def _embedding(r, build):
    nn = _mx().gluon.nn
    layer = r.layer
    return [nn.Embedding(layer.vocab, layer.dim,
                         weight_initializer=_drawn(0.05))]


def _lstm(r, build):
    rnn = _mx().gluon.rnn
    layer = r.layer
    # Gluon keeps two bias vectors per gate (i2h and h2h) like PyTorch:
    # networks.lstm_extra_bias accounts for the second one.
    return [rnn.LSTM(layer.hidden, num_layers=layer.layers, layout="NTC",
                     input_size=r.in_shape[1],
                     i2h_weight_initializer=_glorot(),
                     h2h_weight_initializer=_glorot(),
                     i2h_bias_initializer="zeros",
                     h2h_bias_initializer="zeros")]


def _transformer(r, build):
    return [transformer.block(r)]


# Layer kind -> translator(resolved, build) returning a list of Gluon blocks:
# _dense for nets.Dense and so on (backends.translator_name).
TRANSLATORS = backends.translators(globals(), NAME)


def _build_sequential(resolved_layers):
    sequential = _mx().gluon.nn.HybridSequential()
    for r in resolved_layers:
        translate = backends.translator(TRANSLATORS, r.layer, NAME)
        for block in translate(r, _build_sequential):
            sequential.add(block)
    return sequential


_BLOCKS = {}


def _block(name):
    # HybridBlock subclasses are defined on first use: gluon must not be
    # imported when the module is.
    if not _BLOCKS:
        gluon = _mx().gluon

        class Pad(gluon.HybridBlock):
            def __init__(self, before, after, **kwargs):
                super(Pad, self).__init__(**kwargs)
                # MXNet's pad only pads spatial axes of a 4-D input.
                self.width = (0, 0, 0, 0, before, after, before, after)

            def hybrid_forward(self, F, x):
                return F.pad(x, mode="constant", constant_value=0,
                             pad_width=self.width)

        class Residual(gluon.HybridBlock):
            def __init__(self, body, shortcut, activation, **kwargs):
                super(Residual, self).__init__(**kwargs)
                self.body = body
                self.shortcut = shortcut
                self.activation = activation

            def hybrid_forward(self, F, x):
                out = self.body(x)
                out = out + (x if self.shortcut is None else self.shortcut(x))
                if self.activation is None:
                    return out
                return F.Activation(out, act_type=self.activation)

        class SubsamplePad(gluon.HybridBlock):
            def __init__(self, stride, extra_channels, **kwargs):
                super(SubsamplePad, self).__init__(**kwargs)
                self.stride = stride
                self.extra = extra_channels

            def hybrid_forward(self, F, x):
                none = (None, None, None, None)
                x = F.slice(x, begin=none, end=none,
                            step=(1, 1, self.stride, self.stride))
                if not self.extra:
                    return x
                zeros = F.broadcast_axis(
                    F.zeros_like(F.slice_axis(x, axis=1, begin=0, end=1)),
                    axis=1, size=self.extra)
                return F.concat(x, zeros, dim=1)

        _BLOCKS.update(Pad=Pad, Residual=Residual, SubsamplePad=SubsamplePad,
                       Drawn=_drawn_class(_mx()))
    return _BLOCKS[name]


def _drawn_class(mx):
    class Drawn(mx.init.Initializer):
        """Initial values drawn with numpy into the buffer Gluon gives the
        initializer (which Gluon then copies into the parameter): MXNet's
        sampler is 2.5x slower than numpy's on one core
        (harness.frameworks.draws). A child key a parameter: Gluon's LSTM
        gives one initializer to every layer's matrix."""

        def __init__(self, key, limit=None):
            super(Drawn, self).__init__()
            self.key = key
            self.limit = limit

        def _init_weight(self, name, arr):
            shape = arr.shape
            key = self.key.spawn(1)[0]
            view = _host_view(mx, arr)
            if self.limit is not None:
                values = draws.uniform(key, shape, self.limit, view)
            else:
                receptive = 1
                for d in shape[2:]:
                    receptive *= d
                values = draws.glorot(key, shape, shape[1] * receptive,
                                      shape[0] * receptive, view)
            if view is None:
                arr[:] = values

    return Drawn


def build_model(network, batch_size, device, seed):
    """The network as a Gluon HybridSequential, initialised as described
    from `seed` on `device`'s first context (the data-parallel module moves
    it to its contexts with reset_ctx). Not hybridized: the caller chooses
    how. It leaves MXNet's global generator where batch_arrays() draws
    from."""
    mx = _mx()
    mx.random.seed(seed)
    _KEYS.append(draws.keys(seed))
    try:
        model = _build_sequential(nets.resolve(network))
    finally:
        _KEYS.pop()
    # Every parameter carries its own initializer; the default here is never
    # used.
    if device == "gpu":
        model.initialize(mx.init.Zero(), ctx=context(mx, device))
    else:
        _initialize_in_place(mx, model)
    return model


def _initialize_in_place(mx, model):
    """model.initialize(ctx=mx.cpu()) in one pass over fresh memory, as
    PyTorch's build makes: Gluon's zeroes a buffer for the initializer,
    copies it into the parameter (even from the CPU to the CPU) and zeroes
    a gradient buffer, three passes (fcn5: 3 x 472 MB; its build took 2.2x
    PyTorch's). Here the initializer fills the parameter's own buffer, and
    the gradient buffer is allocated untouched: with grad_req "write" the
    backward pass writes it whole before anything reads it, so its pages
    are first touched in the warm-up, as PyTorch's gradients are. Gluon
    1.9.1's private Parameter fields (pinned); any parameter outside that
    case (deferred shape, sparse, another grad_req) goes Gluon's way."""
    cpu = mx.cpu()
    zero = mx.init.Zero()
    for param in model.collect_params().values():
        shape = param.shape
        if (param._data is not None or not shape or 0 in shape
                or param.grad_req not in ("write", "null")
                or param._stype != "default"
                or param._grad_stype != "default"):
            param.initialize(zero, ctx=cpu)
            continue
        # An initializer writes every element (Gluon's zeroing is a pass)
        data = mx.nd.empty(shape, ctx=cpu, dtype=param.dtype)
        zero(mx.init.InitDesc(param.name, {"__init__": param.init or zero}),
             data)
        param._deferred_init = ()
        param._ctx_list = [cpu]
        param._ctx_map = [[], [0]]  # CPU contexts (device_typeid & 1), id 0
        param._data = [data]
        if param.grad_req == "null":
            param._grad = None
            continue
        param._grad = [mx.nd.empty(shape, ctx=cpu, dtype=param.dtype)]
        mx.autograd.mark_variables(param._data, param._grad, param.grad_req)


def context(mx, device):
    """The MXNet context a one-device cell runs on."""
    return mx.gpu(0) if device == "gpu" else mx.cpu()


def count_parameters(model):
    """Trainable parameters of an initialised Gluon block."""
    total = 0
    for name, param in model.collect_params().items():
        if param.grad_req == "null":  # running mean/variance of batch norm
            continue
        if param.shape is None or 0 in param.shape:
            raise HarnessError("parameter {} has an unknown shape {}: "
                               "initialise the model first".format(
                                   name, param.shape))
        size = 1
        for d in param.shape:
            size *= d
        total += size
    return total


def hybridize(block):
    """MXNet's fast path for a fixed-shape training loop: one cached graph
    with memory and shapes planned once."""
    block.hybridize(static_alloc=True, static_shape=True)
    return block


def loss_block():
    """Mean softmax cross-entropy per sample (per token averaged over the
    sequence for the LSTMs; gluon.Trainer.step(batch) then averages over the
    batch)."""
    return hybridize(_mx().gluon.loss.SoftmaxCrossEntropyLoss(axis=-1))
