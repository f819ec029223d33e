"""The CNTK backend's translation of harness.networks into C.layers
functions: the shape and padding arithmetic (plain Python, tested where
CNTK cannot be installed), one translator per layer kind, the model and its
parameter count. Python 3.6, like the backend (its docstring)."""
import math

from ... import networks as nets
from .. import backends, draws
from ...errors import HarnessError, Unsupported
from .load import _cntk, _numpy

# Why the transformer is not translated for CNTK 2.7 (cells end
# `unsupported` with it).
TRANSFORMER_REASON = (
    "the transformer is not translated for CNTK 2.7: its times() contracts "
    "static axes instead of batching over them, so attention would be one "
    "slice and product per head and layer (144 for gpt-small), and no "
    "erf op for the exact gelu was established; not offered rather than "
    "a translation not proven identical")

NAME = "cntk"


# --- pure arithmetic (tested without CNTK) ----------------------------------

def glorot_limit(fan_in, fan_out):
    return math.sqrt(6.0 / (fan_in + fan_out))


def fans(r):
    """(fan_in, fan_out) of a resolved Dense, TimeDense or Conv layer, as
    the description (and the PyTorch backend) counts them."""
    layer, kind = r.layer, type(r.layer)
    if kind is nets.Dense:
        return r.in_shape[0], layer.units
    if kind is nets.TimeDense:
        return r.in_shape[1], layer.units
    if kind is nets.Conv:
        receptive = layer.kernel ** 2
        return r.in_shape[0] * receptive, layer.filters * receptive
    raise HarnessError("no fans for {}".format(kind.__name__))


def conv_padding(layer):
    """How a Conv is padded in CNTK: "none"; "auto" (CNTK centres the kernel
    on every stride-th input, which for an odd kernel is exactly
    (kernel // 2, kernel // 2)); or (before, after) zeros spliced in."""
    before, after = layer.pad
    if before == after == 0:
        return "none"
    if before == after == layer.kernel // 2 and layer.kernel % 2 == 1:
        return "auto"
    return (before, after)


def conv_size(size, layer):
    """One spatial output size of a Conv, by CNTK's rule for its padding."""
    mode = conv_padding(layer)
    if mode == "auto":
        return -(-size // layer.stride)
    before, after = (0, 0) if mode == "none" else mode
    return (size + before + after - layer.kernel) // layer.stride + 1


def pool_size(size, layer):
    """One spatial output size of C.pooling without padding and with
    ceil_out_dim=True."""
    return -(-(size - layer.kernel) // layer.stride) + 1


# CNTK's rules for the shapes of the translated layers (tests compare them
# with networks.resolve).
_SHAPES = backends.ShapeRules("CNTK", conv_size, pool_size)
planned_shape = _SHAPES.shape
planned_shapes = _SHAPES.shapes
subsample_padding = backends.subsample_padding


def bn_time_constant(momentum, samples):
    """CNTK's normalization_time_constant (in samples) that blends the
    running statistics like a decay of `momentum` per minibatch of
    `samples`: CNTK's blend factor is 1 - exp(-samples / time_constant)."""
    return -samples / math.log(momentum)


def minibatch_plan(network, batch_size):
    """{"sequences", "samples"}: what one train_minibatch call holds. CNTK
    counts samples in sequence elements, so an LSTM minibatch of
    `batch_size` sequences is batch_size x steps samples; the learning rate
    is given for that many samples (the mean gradient per token)."""
    if network.input_dtype == "int64":
        steps = network.input_shape[0]
        return {"sequences": batch_size, "samples": batch_size * steps}
    return {"sequences": batch_size, "samples": batch_size}


_product = backends.product


# --- translation -------------------------------------------------------------

def _activation_kwargs(C, name):
    if name is None:
        return {}  # C.layers' default: identity
    return {"activation": {"relu": C.relu, "sigmoid": C.sigmoid}[name]}


def _apply_activation(C, name, x):
    return x if name is None else {"relu": C.relu, "sigmoid": C.sigmoid}[name](x)


def _uniform(C, limit):
    return C.initializer.uniform(limit)


def _zeros(C, x, axis, count, size):
    """`count` zeros along static `axis` (of extent `size`), with x's other
    dimensions and dynamic axes: slices of x times 0."""
    pieces = []
    while count > 0:
        take = min(count, size)
        pieces.append(C.element_times(C.slice(x, axis, 0, take), 0.0))
        count -= take
    return pieces[0] if len(pieces) == 1 else C.splice(*pieces, axis=axis)


def _pad_axis(C, x, axis, size, before, after):
    parts = []
    if before:
        parts.append(_zeros(C, x, axis, before, size))
    parts.append(x)
    if after:
        parts.append(_zeros(C, x, axis, after, size))
    return x if len(parts) == 1 else C.splice(*parts, axis=axis)


def _drawn(C, ctx, shape, limit, name):
    """A Parameter of `shape` holding uniform(-limit, limit) values drawn
    with numpy from the layer's own key (harness.frameworks.draws; keys
    spawned in translation order). CNTK's generator made fcn5's build 2.5x
    PyTorch's. The values are copied into CNTK's buffer (from_dense): one
    numpy buffer, as large as the largest layer, serves every layer of the
    build, so that fresh pages are touched for it once. Borrowing the
    buffer instead (from_dense(borrow=True)) would save the copy, but the
    Parameter would then hold memory that nothing keeps."""
    size = _product(shape)
    scratch = ctx.get("scratch")
    if scratch is None or scratch.size < size:
        scratch = ctx["scratch"] = draws.aligned_empty((size,))
    values = scratch[:size].reshape(shape)
    draws.uniform(ctx["keys"].spawn(1)[0], shape, limit, out=values)
    return C.Parameter(init=values, name=name)


def _affine(C, x, W, activation):
    """What C.layers.Dense does with a W of known shape (its own W can only
    take CNTK's initialisers): times, a zero bias, the activation (a
    description's name, or None), in one block."""
    b = C.Parameter(W.shape[-1:], init=0, name="b")

    @C.layers.blocks.BlockFunction("Dense", "")
    def dense(x):
        r = C.times(x, W, output_rank=1, infer_input_rank_to_map=0) + b
        return _apply_activation(C, activation, r)
    return dense(x)


def _glorot_weight(C, r, ctx):
    fan_in, fan_out = fans(r)
    return _drawn(C, ctx, (fan_in, fan_out), glorot_limit(fan_in, fan_out),
                  "W")


def _dense(C, r, x, build, ctx):
    return _affine(C, x, _glorot_weight(C, r, ctx), r.layer.activation)


def _time_dense(C, r, x, build, ctx):
    # Applied to a sequence, a Dense layer maps every element.
    return _affine(C, x, _glorot_weight(C, r, ctx), None)


def _conv(C, r, x, build, ctx):
    layer = r.layer
    mode = conv_padding(layer)
    if mode not in ("auto", "none"):
        before, after = mode
        _, h, w = r.in_shape
        x = _pad_axis(C, x, 1, h, before, after)
        x = _pad_axis(C, x, 2, w, before, after)
    conv = C.layers.Convolution2D(
        (layer.kernel, layer.kernel), layer.filters,
        strides=(layer.stride, layer.stride), pad=(mode == "auto"),
        bias=layer.bias, init=_uniform(C, glorot_limit(*fans(r))),
        init_bias=0, **_activation_kwargs(C, layer.activation))
    return conv(x)


def _batch_norm(C, r, x, build, ctx):
    layer = r.layer
    norm = C.layers.BatchNormalization(
        map_rank=1, epsilon=layer.eps,
        normalization_time_constant=bn_time_constant(layer.momentum,
                                                     ctx["samples"]))
    return _apply_activation(C, layer.activation, norm(x))


def _activation(C, r, x, build, ctx):
    return _apply_activation(C, r.layer.fn, x)


def _pool(C, r, x, build, ctx):
    layer = r.layer
    kind = C.MAX_POOLING if layer.op == "max" else C.AVG_POOLING
    return C.pooling(x, kind, (layer.kernel, layer.kernel),
                     strides=(layer.stride, layer.stride),
                     auto_padding=[False], ceil_out_dim=True,
                     include_pad=False)


def _global_avg_pool(C, r, x, build, ctx):
    return C.reshape(C.layers.GlobalAveragePooling()(x), (r.in_shape[0],))


def _flatten(C, r, x, build, ctx):
    return C.reshape(x, (_product(r.in_shape),))


def _residual(C, r, x, build, ctx):
    body, shortcut = r.children
    out = build(body, x, ctx)
    out = out + (x if shortcut is None else build(shortcut, x, ctx))
    return _apply_activation(C, r.layer.activation, out)


def _subsample_pad(C, r, x, build, ctx):
    c, h, w = r.in_shape
    s = r.layer.stride
    x = _pad_axis(C, x, 1, h, 0, subsample_padding(h, s))
    x = _pad_axis(C, x, 2, w, 0, subsample_padding(w, s))
    h2, w2 = -(-h // s), -(-w // s)
    # A strided slice: (c, h2, s, w2, s), keep index 0 of both s axes.
    x = C.reshape(x, (c, h2, s, w2, s))
    x = C.slice(C.slice(x, 2, 0, 1), 4, 0, 1)
    x = C.reshape(x, (c, h2, w2))
    extra = r.layer.channels - c
    if extra:
        x = C.splice(x, _zeros(C, x, 0, extra, c), axis=0)
    return x


def _embedding(C, r, x, build, ctx):
    E = _drawn(C, ctx, (r.layer.vocab, r.layer.dim), 0.05, "E")

    @C.layers.blocks.BlockFunction("Embedding", "")
    def embed(x):
        return C.times(x, E)
    return embed(x)


def _lstm(C, r, x, build, ctx):
    layer = r.layer
    inputs = r.in_shape[1]
    if inputs != layer.hidden:
        # One `init` serves both the input (inputs x 4h) and the recurrent
        # (h x 4h) matrices, whose Glorot limits then differ.
        raise HarnessError("cntk backend: LSTM input width {} != hidden {} "
                           "needs per-matrix initialisation".format(
                               inputs, layer.hidden))
    limit = glorot_limit(layer.hidden, 4 * layer.hidden)
    for _ in range(layer.layers):
        # One bias vector per gate, like TensorFlow: the description's count.
        cell = C.layers.LSTM(layer.hidden, init=_uniform(C, limit), init_bias=0)
        x = C.layers.Recurrence(cell)(x)
    return x


def _transformer(C, r, x, build, ctx):
    raise Unsupported(TRANSFORMER_REASON)


# Layer kind -> translator(C, resolved, x, build, ctx) returning the output:
# _dense for nets.Dense and so on (backends.translator_name).
TRANSLATORS = backends.translators(globals(), NAME)


def _build(resolved_layers, x, ctx):
    C = _cntk()
    for r in resolved_layers:
        translate = backends.translator(TRANSLATORS, r.layer, NAME)
        x = translate(C, r, x, _build, ctx)
    return x


def input_variables(network):
    """(features, labels) input variables: dense images or vectors with one
    sparse one-hot label, or sparse one-hot token sequences for the LSTMs."""
    C = _cntk()
    np = _numpy()
    if network.input_dtype == "int64":
        return (C.sequence.input_variable(network.classes, is_sparse=True),
                C.sequence.input_variable(network.classes, is_sparse=True))
    return (C.input_variable(tuple(network.input_shape), dtype=np.float32),
            C.input_variable(network.classes, is_sparse=True))


def build_model(network, batch_size, device, seed):
    """The network as a CNTK Function of new input_variables features
    (its `arguments`), initialised from `seed` on CNTK's default device
    (configure() chose it): dense and embedding weights drawn with numpy
    (_drawn), convolution and LSTM weights with CNTK's seeded generator
    (C.layers takes no values for them). `batch_size` fixes batch norm's
    time constant, which CNTK counts in samples."""
    _cntk().cntk_py.set_fixed_random_seed(seed)
    features = input_variables(network)[0]
    ctx = {"samples": minibatch_plan(network, batch_size)["samples"],
           "keys": draws.keys(seed)}
    return _build(nets.resolve(network), features, ctx)


def count_parameters(model):
    total = 0
    for parameter in model.parameters:
        total += _product(parameter.shape)
    return total
