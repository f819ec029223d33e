"""The Caffe backend's translation of harness.networks into a NetSpec: the
shape arithmetic (plain Python, tested where Caffe cannot be installed) and
one translator per layer kind (the backend module's docstring lists how
each matches the description). Python 3.6, like the backend."""
import math

from ... import networks as nets
from .. import backends
from ...errors import Unsupported
from .load import _caffe

# Why the transformer cannot be built (cells end `unsupported` with it).
TRANSFORMER_REASON = (
    "Caffe 1.0 has no batched product of two blobs (its InnerProduct "
    "multiplies a blob by a weight), so attention's scores q.k and "
    "weighted values cannot be expressed")

NAME = "caffe"


# --- pure arithmetic (tested without Caffe) ----------------------------------

def conv_padding(layer):
    """How a Conv is padded in Caffe: an int, the Convolution's own
    symmetric pad; or (before, after), zeros spliced in around an unpadded
    Convolution."""
    before, after = layer.pad
    if before == after:
        return before
    return (before, after)


def conv_size(size, layer):
    """One spatial output size of the Caffe translation of a Conv."""
    mode = conv_padding(layer)
    before, after = (mode, mode) if isinstance(mode, int) else mode
    return (size + before + after - layer.kernel) // layer.stride + 1


def pool_size(size, layer):
    """Caffe's pooled size without padding: ceil((size - k) / s) + 1."""
    return int(math.ceil(float(size - layer.kernel) / layer.stride)) + 1


# Caffe's rules for the shapes of the translated layers (tests compare them
# with networks.resolve). Sequences are time-major in Caffe; shapes here are
# per sample, (steps, features), like the description's.
_SHAPES = backends.ShapeRules("Caffe", conv_size, pool_size)
planned_shape = _SHAPES.shape
planned_shapes = _SHAPES.shapes
subsample_padding = backends.subsample_padding


# --- translation -------------------------------------------------------------

def _xavier():
    # Glorot uniform: Caffe's "xavier" with n = (fan_in + fan_out) / 2,
    # where fan_in = count / shape[0] and fan_out = count / shape[1], i.e.
    # the description's fans for dense (out, in) and conv (out, in, k, k)
    # weights and for the LSTM's (4H, in) and (4H, H) matrices.
    caffe = _caffe()
    return dict(type="xavier",
                variance_norm=caffe.proto.caffe_pb2.FillerParameter.AVERAGE)


def _zero():
    return dict(type="constant", value=0.0)


def _activate(L, name, x):
    if name is None:
        return x
    layer = {"relu": L.ReLU, "sigmoid": L.Sigmoid}[name]
    return layer(x, in_place=True)


def _dense(L, r, x, ctx):
    out = L.InnerProduct(x, num_output=r.layer.units,
                         weight_filler=_xavier(), bias_filler=_zero())
    return _activate(L, r.layer.activation, out)


def _time_dense(L, r, x, ctx):
    # Time-major (steps, batch, features): one product per step and sample.
    return L.InnerProduct(x, num_output=r.layer.units, axis=2,
                          weight_filler=_xavier(), bias_filler=_zero())


def _zeros(L, ctx, shape):
    """A constant zero blob of per-sample `shape` (filled once at set-up)."""
    return L.DummyData(shape=dict(dim=[ctx["batch"]] + list(shape)),
                       data_filler=_zero())


def _pad_axis(L, x, ctx, shape, axis, before, after):
    """x (per-sample `shape`) with zeros spliced in on spatial `axis` (1 or
    2 of the per-sample shape); returns (x, its new shape)."""
    parts = []
    for count in (before, None, after):
        if count is None:
            parts.append(x)
        elif count:
            size = list(shape)
            size[axis] = count
            parts.append(_zeros(L, ctx, size))
    shape = list(shape)
    shape[axis] += before + after
    if len(parts) == 1:
        return x, tuple(shape)
    return L.Concat(*parts, axis=axis + 1), tuple(shape)


def _conv(L, r, x, ctx):
    layer = r.layer
    pad = conv_padding(layer)
    if not isinstance(pad, int):
        shape = r.in_shape
        x, shape = _pad_axis(L, x, ctx, shape, 1, pad[0], pad[1])
        x, shape = _pad_axis(L, x, ctx, shape, 2, pad[0], pad[1])
        pad = 0
    out = L.Convolution(x, num_output=layer.filters, kernel_size=layer.kernel,
                        stride=layer.stride, pad=pad,
                        bias_term=layer.bias, weight_filler=_xavier(),
                        bias_filler=_zero())
    return _activate(L, layer.activation, out)


def _batch_norm(L, r, x, ctx):
    layer = r.layer
    out = L.BatchNorm(x, eps=layer.eps,
                      moving_average_fraction=layer.momentum, in_place=True)
    out = L.Scale(out, bias_term=True, in_place=True,
                  filler=dict(type="constant", value=1.0),
                  bias_filler=_zero())
    return _activate(L, layer.activation, out)


def _activation(L, r, x, ctx):
    return _activate(L, r.layer.fn, x)


def _pool(L, r, x, ctx):
    P = _caffe().params
    op = P.Pooling.MAX if r.layer.op == "max" else P.Pooling.AVE
    return L.Pooling(x, pool=op, kernel_size=r.layer.kernel,
                     stride=r.layer.stride)


def _global_avg_pool(L, r, x, ctx):
    P = _caffe().params
    return L.Flatten(L.Pooling(x, pool=P.Pooling.AVE, global_pooling=True))


def _flatten(L, r, x, ctx):
    return L.Flatten(x)


def _residual(L, r, x, ctx):
    P = _caffe().params
    body, shortcut = r.children
    out = _build(L, body, x, ctx)
    short = x if shortcut is None else _build(L, shortcut, x, ctx)
    out = L.Eltwise(out, short, operation=P.Eltwise.SUM)
    return _activate(L, r.layer.activation, out)


def _keep_first(L, x, axis):
    """(index 0 of `axis`, the Silence layer that consumes the rest): a
    Slice's unused top must be consumed, or Caffe reports it as an output."""
    first, rest = L.Slice(x, axis=axis, slice_point=[1], ntop=2)
    return first, L.Silence(rest, ntop=0)


def _subsample_pad(L, r, x, ctx):
    # Keep every stride-th pixel: zeros appended until the sizes divide by
    # the stride, a reshape of (N, C, H, W) to (N, C, H/s, s, W/s, s), index
    # 0 of both s axes kept; then zero channels appended up to `channels`.
    # Exact, parameter-free.
    c, h, w = r.in_shape
    s = r.layer.stride
    shape = r.in_shape
    x, shape = _pad_axis(L, x, ctx, shape, 1, 0, subsample_padding(h, s))
    x, shape = _pad_axis(L, x, ctx, shape, 2, 0, subsample_padding(w, s))
    _, h2, w2 = planned_shape(r)
    x = L.Reshape(x, shape=dict(dim=[0, 0, h2, s, w2, s]))
    for axis in (3, 5):
        x, silence = _keep_first(L, x, axis)
        ctx["silenced"].append(silence)
    x = L.Reshape(x, shape=dict(dim=[0, 0, h2, w2]))
    extra = r.layer.channels - c
    if extra:
        x = L.Concat(x, _zeros(L, ctx, (extra, h2, w2)), axis=1)
    return x


def _embedding(L, r, x, ctx):
    return L.Embed(x, input_dim=r.layer.vocab, num_output=r.layer.dim,
                   bias_term=False,
                   weight_filler=dict(type="uniform", min=-0.05, max=0.05))


def _lstm(L, r, x, ctx):
    for _ in range(r.layer.layers):
        x = L.LSTM(x, ctx["cont"], recurrent_param=dict(
            num_output=r.layer.hidden, weight_filler=_xavier(),
            bias_filler=_zero()))
    return x


def _transformer(L, r, x, ctx):
    raise Unsupported(TRANSFORMER_REASON)


# Layer kind -> translator(L, resolved, x, ctx) returning the output top:
# _dense for nets.Dense and so on (backends.translator_name).
TRANSLATORS = backends.translators(globals(), NAME)


def _build(L, resolved_layers, x, ctx):
    for r in resolved_layers:
        translate = backends.translator(TRANSLATORS, r.layer, NAME)
        x = translate(L, r, x, ctx)
    return x


def is_sequence(network):
    return network.input_dtype == "int64"


def net_spec(network, batch_size, loss=True):
    """The network as a caffe.NetSpec (inputs `data` and `label`, `cont`
    for sequences; output `output`; loss `loss`), written from
    harness.networks. Without `loss`: no label and no loss, a net to run
    forward (tests probe single layers with it)."""
    caffe = _caffe()
    L = caffe.layers
    n = caffe.NetSpec()
    ctx = {"batch": batch_size, "silenced": []}
    if is_sequence(network):
        steps = network.input_shape[0]
        time_major = dict(dim=[steps, batch_size])
        n.data = L.Input(shape=time_major)
        n.cont = L.Input(shape=time_major)
        if loss:
            n.label = L.Input(shape=time_major)
        ctx["cont"] = n.cont
        axis = 2
    else:
        n.data = L.Input(shape=dict(dim=[batch_size] +
                                    list(network.input_shape)))
        if loss:
            n.label = L.Input(shape=dict(dim=[batch_size]))
        axis = 1
    n.output = _build(L, nets.resolve(network), n.data, ctx)
    if loss:
        n.loss = L.SoftmaxWithLoss(n.output, n.label,
                                   softmax_param=dict(axis=axis))
    for number, silence in enumerate(ctx["silenced"]):
        # A layer without tops is only emitted when NetSpec holds it.
        setattr(n, "silence{}".format(number), silence)
    return n


def net_parameter(network, batch_size):
    return net_spec(network, batch_size).to_proto()
