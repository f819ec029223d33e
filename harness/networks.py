"""The paper's ten networks and today's decoder-only transformer, written
once as data.

Every backend builds its framework's model from these descriptions and from the
shapes that `resolve` infers, so layer sizes cannot drift apart between
frameworks (the 2016 round had MXNet's ResNet-50 with wrong widths and CNTK's
FCN-R with two layers swapped). Parameter and FLOP counts come from the same
data and are what every result reports.

Conventions shared by all backends:
- images are described channels-first (C, H, W); a backend may transpose;
- padding is explicit, (before, after) on both spatial axes, so that
  TensorFlow's asymmetric SAME padding is reproduced exactly everywhere;
- pooling windows that run off the edge are kept (ceil mode, as Caffe and
  TensorFlow's SAME pooling do); average pools divide by the in-bounds count;
- weights: Glorot-uniform; biases: zero; batch-norm gamma 1, beta 0;
  embeddings: uniform(-0.05, 0.05); LSTM forget-gate bias: zero like the rest;
  layer-norm gamma 1, beta 0 (the transformer: see Transformer);
  drawn from the cell's seed, by numpy's default generator in TensorFlow,
  MXNet and JAX (harness.frameworks.draws), by the framework's own in
  PyTorch (a large tensor by spans side by side,
  harness.frameworks.pytorch.initial), CNTK and Caffe: the same
  distributions, other values;
- loss: mean softmax cross-entropy over samples (over tokens for the LSTMs
  and the transformer);
- optimizer: plain SGD with the network's learning rate and momentum.
"""
from collections import namedtuple

from .errors import HarnessError, named
from .transformer import (  # noqa: F401 (part of the description)
    SEQUENCE_SEPARATOR, Transformer, attention_shapes, context,
    sequence_variant, transformer_macs, transformer_parameters)

# Layer kinds. Backends dispatch on the class, so adding a kind means adding
# it to every backend (tests enumerate the kinds and fail otherwise).
Dense = namedtuple("Dense", "units activation")
Conv = namedtuple("Conv", "filters kernel stride pad bias activation")
BatchNorm = namedtuple("BatchNorm", "eps momentum activation")
Activation = namedtuple("Activation", "fn")
Pool = namedtuple("Pool", "op kernel stride")
GlobalAvgPool = namedtuple("GlobalAvgPool", "")
Flatten = namedtuple("Flatten", "")
# shortcut: a list of layers, or None for the identity.
Residual = namedtuple("Residual", "body shortcut activation")
# The "option A" shortcut of He et al.'s CIFAR ResNets: keep every
# `stride`-th pixel, then append zero channels up to `channels`.
SubsamplePad = namedtuple("SubsamplePad", "stride channels")
Embedding = namedtuple("Embedding", "vocab dim")
LSTM = namedtuple("LSTM", "hidden layers")
# A dense layer applied at every time step of a sequence.
TimeDense = namedtuple("TimeDense", "units")
LAYER_KINDS = (Dense, Conv, BatchNorm, Activation, Pool, GlobalAvgPool, Flatten,
               Residual, SubsamplePad, Embedding, LSTM, TimeDense, Transformer)

Network = namedtuple(
    "Network",
    "name input_shape input_dtype classes layers learning_rate momentum "
    "dataset description")

# A resolved layer: the layer with the shapes around it (per sample, without
# the batch axis). For Residual, `children` holds (body, shortcut) resolved;
# for every other kind it is None.
Resolved = namedtuple("Resolved", "layer in_shape out_shape children")


def _conv(filters, kernel, stride=1, pad=None, bias=True, activation="relu"):
    if pad is None:
        pad = (kernel // 2, kernel // 2)
    return Conv(filters, kernel, stride, tuple(pad), bias, activation)


def _bn(activation=None):
    return BatchNorm(1e-5, 0.9, activation)


def _fcn(name, hidden_layers):
    layers = [Dense(2048, "sigmoid") for _ in range(hidden_layers)]
    layers.append(Dense(26752, None))
    return Network(name, (26752,), "float32", 26752, layers, 0.01, 0.0,
                   "synthetic",
                   "26752-{}-26752 fully connected, sigmoid".format(
                       "-".join(["2048"] * hidden_layers)))


def _alexnet():
    layers = [
        # 224 -> 56 with TensorFlow's SAME padding for an 11x11/4 kernel:
        # 7 padded pixels in all, 3 before and 4 after.
        _conv(96, 11, 4, pad=(3, 4)),
        Pool("max", 3, 2),
        _conv(256, 5),
        Pool("max", 3, 2),
        _conv(384, 3),
        _conv(384, 3),
        _conv(256, 3),
        Pool("max", 3, 2),
        Flatten(),
        Dense(4096, "relu"),
        Dense(4096, "relu"),
        Dense(1000, None),
    ]
    return Network("alexnet", (3, 224, 224), "float32", 1000, layers, 0.01,
                   0.0, "synthetic", "AlexNet without LRN and dropout")


def _bottleneck(in_ch, mid, out, stride):
    body = [
        _conv(mid, 1, 1, bias=False, activation=None), _bn("relu"),
        _conv(mid, 3, stride, bias=False, activation=None), _bn("relu"),
        _conv(out, 1, 1, bias=False, activation=None), _bn(None),
    ]
    shortcut = None
    if stride != 1 or in_ch != out:
        shortcut = [_conv(out, 1, stride, pad=(0, 0), bias=False,
                          activation=None), _bn(None)]
    return Residual(body, shortcut, "relu")


def _resnet50():
    layers = [_conv(64, 7, 2, pad=(3, 3), bias=False, activation=None),
              _bn("relu"),
              Pool("max", 3, 2)]
    in_ch = 64
    # torchvision's "v1.5": the stride sits on the 3x3 convolution.
    for mid, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2),
                                (512, 3, 2)):
        for i in range(blocks):
            layers.append(_bottleneck(in_ch, mid, mid * 4,
                                      stride if i == 0 else 1))
            in_ch = mid * 4
    layers += [GlobalAvgPool(), Dense(1000, None)]
    return Network("resnet50", (3, 224, 224), "float32", 1000, layers, 0.01,
                   0.0, "synthetic", "ResNet-50 (bottleneck, v1.5)")


def _basic_block(in_ch, out, stride):
    body = [
        _conv(out, 3, stride, bias=False, activation=None), _bn("relu"),
        _conv(out, 3, 1, bias=False, activation=None), _bn(None),
    ]
    shortcut = None
    if stride != 1 or in_ch != out:
        shortcut = [SubsamplePad(stride, out)]
    return Residual(body, shortcut, "relu")


def _resnet56():
    layers = [_conv(16, 3, bias=False, activation=None), _bn("relu")]
    in_ch = 16
    for width, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(9):
            layers.append(_basic_block(in_ch, width, stride if i == 0 else 1))
            in_ch = width
    layers += [GlobalAvgPool(), Dense(10, None)]
    return Network("resnet-56", (3, 32, 32), "float32", 10, layers, 0.01, 0.0,
                   "cifar10", "CIFAR ResNet 6n+2, n=9, identity shortcuts "
                   "with zero-padded channels (option A)")


def _alexnet_r():
    # cuda-convnet's layers-18pct without LRN, in the layer order Shi et al.
    # 2016 (arXiv:1608.07249) give for AlexNet-R.
    layers = [
        _conv(32, 5, activation=None), Pool("max", 3, 2), Activation("relu"),
        _conv(32, 5), Pool("max", 3, 2),
        _conv(64, 5), Pool("avg", 3, 2),
        Flatten(),
        Dense(10, None),
    ]
    return Network("alexnet-r", (3, 32, 32), "float32", 10, layers, 0.01, 0.0,
                   "cifar10", "cuda-convnet layers-18pct without LRN")


def _fcn_r():
    layers = [Dense(2048, "sigmoid"), Dense(4096, "sigmoid"),
              Dense(1024, "sigmoid"), Dense(10, None)]
    return Network("fcn-r", (784,), "float32", 10, layers, 0.05, 0.9, "mnist",
                   "784-2048-4096-1024-10 fully connected, sigmoid")


def _lstm(name, steps, learning_rate, dataset):
    layers = [Embedding(10000, 256), LSTM(256, 2), TimeDense(10000)]
    return Network(name, (steps,), "int64", 10000, layers, learning_rate, 0.0,
                   dataset, "2x256 LSTM over {} steps, vocabulary 10000".format(
                       steps))


def _gpt(name, vocab, dim, context, layers, heads, ff, size):
    body = Transformer(vocab, dim, context, layers, heads, ff, 1e-5)
    # A sample is one sequence of `context` tokens, as for the LSTMs; a
    # shorter one is asked for by name (sequence_variant).
    return Network(name, (context,), "int64", vocab, [body], 0.01, 0.0,
                   "synthetic",
                   "decoder-only transformer ({}): {} layers, width {}, {} "
                   "heads, feed-forward {}, context {}, vocabulary {}, tied "
                   "embeddings".format(size, layers, dim, heads, ff, context,
                                       vocab))


NETWORKS = dict((n.name, n) for n in (
    _fcn("fcn5", 3),
    _fcn("fcn8", 6),
    _alexnet(),
    _resnet50(),
    _lstm("lstm32", 32, 0.01, "synthetic"),
    _lstm("lstm64", 64, 0.01, "synthetic"),
    _fcn_r(),
    _alexnet_r(),
    _resnet56(),
    _lstm("lstm", 32, 0.1, "ptb"),
    _gpt("gpt-small", 50257, 768, 1024, 12, 12, 3072, "GPT-2 small"),
    _gpt("gpt-tiny", 1000, 128, 64, 2, 4, 512, "smoke size"),
))

def get(name):
    """The network called `name` (or a transformer's NAME@STEPS), or a
    HarnessError listing the valid ones."""
    if isinstance(name, str) and SEQUENCE_SEPARATOR in name:
        base, steps = name.split(SEQUENCE_SEPARATOR, 1)
        return sequence_variant(named(NETWORKS, base, "network"), steps)
    return named(NETWORKS, name, "network")


# --- shape inference -------------------------------------------------------

def _pool_out(size, kernel, stride):
    # ceil mode: a last window that starts inside the input is kept.
    return -(-(size - kernel) // stride) + 1


def _resolve_layer(layer, shape):
    kind = type(layer)
    children = None
    if kind is Dense:
        if len(shape) != 1:
            raise HarnessError("Dense needs a flat input, got {}".format(shape))
        out = (layer.units,)
    elif kind is Conv:
        c, h, w = shape
        before, after = layer.pad
        out = (layer.filters,
               (h + before + after - layer.kernel) // layer.stride + 1,
               (w + before + after - layer.kernel) // layer.stride + 1)
    elif kind in (BatchNorm, Activation):
        out = shape
    elif kind is Pool:
        c, h, w = shape
        out = (c, _pool_out(h, layer.kernel, layer.stride),
               _pool_out(w, layer.kernel, layer.stride))
    elif kind is GlobalAvgPool:
        out = (shape[0],)
    elif kind is Flatten:
        size = 1
        for d in shape:
            size *= d
        out = (size,)
    elif kind is Residual:
        body = resolve_layers(layer.body, shape)
        out = body[-1].out_shape
        shortcut = None
        if layer.shortcut is not None:
            shortcut = resolve_layers(layer.shortcut, shape)
            if shortcut[-1].out_shape != out:
                raise HarnessError("residual branches disagree: {} vs {}".format(
                    out, shortcut[-1].out_shape))
        elif shape != out:
            raise HarnessError("identity shortcut needs equal shapes")
        children = (body, shortcut)
    elif kind is SubsamplePad:
        c, h, w = shape
        out = (layer.channels, -(-h // layer.stride), -(-w // layer.stride))
    elif kind is Embedding:
        out = (shape[0], layer.dim)
    elif kind is LSTM:
        out = (shape[0], layer.hidden)
    elif kind is TimeDense:
        out = (shape[0], layer.units)
    elif kind is Transformer:
        if shape[0] > layer.context:
            raise HarnessError("sequence of {} tokens is above the context "
                               "of {}".format(shape[0], layer.context))
        if layer.dim % layer.heads:
            raise HarnessError("width {} does not divide into {} heads".format(
                layer.dim, layer.heads))
        out = (shape[0], layer.vocab)
    else:
        raise HarnessError("unknown layer kind {}".format(kind.__name__))
    return Resolved(layer, tuple(shape), tuple(out), children)


def resolve_layers(layers, shape):
    """Resolve a list of layers starting from a per-sample input `shape`."""
    resolved = []
    for layer in layers:
        r = _resolve_layer(layer, shape)
        resolved.append(r)
        shape = r.out_shape
    return resolved


def resolve(network):
    return resolve_layers(network.layers, network.input_shape)


def output_shape(network):
    """Per-sample output shape: (classes,) or (steps, classes)."""
    return resolve(network)[-1].out_shape


# --- parameter and FLOP counts ----------------------------------------------

def _walk(resolved):
    for r in resolved:
        yield r
        if r.children is not None:
            body, shortcut = r.children
            for child in _walk(body):
                yield child
            if shortcut is not None:
                for child in _walk(shortcut):
                    yield child


def largest_tensor(network):
    """Elements of the largest tensor one sample makes, input or a layer's
    output or a transformer's attention scores."""
    shapes = [network.input_shape]
    for r in _walk(resolve(network)):
        shapes += [r.out_shape]
        if type(r.layer) is Transformer:
            shapes += attention_shapes(r.layer, r.in_shape[0])
    return max(elements(shape) for shape in shapes)


def elements(shape):
    """The number of elements of a tensor of `shape` (1 for ())."""
    count = 1
    for size in shape:
        count *= size
    return count


def layer_kinds(network):
    """The kinds of layer `network` holds, residual blocks' included."""
    return set(type(r.layer) for r in _walk(resolve(network)))


def _layer_parameters(r):
    layer, kind = r.layer, type(r.layer)
    if kind is Dense:
        return r.in_shape[0] * layer.units + layer.units
    if kind is TimeDense:
        return r.in_shape[1] * layer.units + layer.units
    if kind is Conv:
        weights = r.in_shape[0] * layer.filters * layer.kernel ** 2
        return weights + (layer.filters if layer.bias else 0)
    if kind is BatchNorm:
        return 2 * r.in_shape[0]
    if kind is Embedding:
        return layer.vocab * layer.dim
    if kind is LSTM:
        total, inputs = 0, r.in_shape[1]
        for _ in range(layer.layers):
            # one bias vector per gate; see LSTM_EXTRA_BIAS for frameworks
            # that keep two.
            total += 4 * layer.hidden * (inputs + layer.hidden + 1)
            inputs = layer.hidden
        return total
    if kind is Transformer:
        return transformer_parameters(layer)
    return 0


def parameter_count(network):
    """Trainable parameters with one bias vector per LSTM gate."""
    return sum(_layer_parameters(r) for r in _walk(resolve(network)))


def lstm_extra_bias(network):
    """Parameters that frameworks with two LSTM bias vectors (PyTorch's
    b_ih and b_hh, MXNet's i2h and h2h) count on top of parameter_count."""
    return sum(4 * r.layer.hidden * r.layer.layers
               for r in _walk(resolve(network)) if type(r.layer) is LSTM)


def _layer_macs(r):
    layer, kind = r.layer, type(r.layer)
    if kind is Dense:
        return r.in_shape[0] * layer.units
    if kind is TimeDense:
        return r.in_shape[0] * r.in_shape[1] * layer.units
    if kind is Conv:
        c_out, h, w = r.out_shape
        return r.in_shape[0] * layer.kernel ** 2 * c_out * h * w
    if kind is LSTM:
        steps, inputs = r.in_shape
        total = 0
        for _ in range(layer.layers):
            total += steps * 4 * layer.hidden * (inputs + layer.hidden)
            inputs = layer.hidden
        return total
    if kind is Transformer:
        return transformer_macs(layer, r.in_shape[0])
    return 0


FLOPS_CONVENTION = ("2 FLOPs per multiply-accumulate of dense, convolution "
                    "and LSTM-gate products and of attention's score and "
                    "value products (every key, masked or not); "
                    "element-wise work, softmax, pooling and "
                    "normalisation not counted; one training iteration = "
                    "3 x forward (forward, input gradients, weight gradients)")


EXECUTED_FLOPS_CONVENTION = (
    "as flops_per_iteration, less the gradients nothing needs: the input "
    "gradients of the first layer with parameters and of any layer before "
    "it (they lead back to the data) and each LSTM layer's gradient into "
    "its zero initial state; achieved FLOP/s and MFU use this count")


def forward_flops_per_sample(network):
    return 2 * sum(_layer_macs(r) for r in _walk(resolve(network)))


def flops_per_iteration(network, global_batch_size):
    """Analytic training FLOPs for one mini-batch (see FLOPS_CONVENTION)."""
    return 3 * forward_flops_per_sample(network) * global_batch_size


def _input_gradient_macs(r):
    """Multiply-accumulates of a layer's gradient with respect to its
    input: a dense or convolution layer's equal its forward ones; an LSTM
    stack's are its first layer's input projection (the recurrent products
    are needed for the weights anyway)."""
    if type(r.layer) is LSTM:
        steps, inputs = r.in_shape
        return steps * 4 * r.layer.hidden * inputs
    if type(r.layer) is Transformer:
        # Its input is token ids: the table lookup has no input gradient.
        return 0
    return _layer_macs(r)


def skipped_flops_per_sample(network):
    """Backward FLOPs that 3 x forward counts but training does not need:
    input gradients of the layers up to and including the first layer with
    parameters, whose input (the data) needs no gradient; and in every LSTM
    layer the recurrent gradient into the zero initial state."""
    skipped = 0
    for r in resolve(network):
        skipped += _input_gradient_macs(r)
        if type(r.layer) is Residual or _layer_parameters(r):
            # Everything after a trainable layer feeds its gradient (a
            # residual block is taken as trainable: all of ours are).
            break
    for r in _walk(resolve(network)):
        if type(r.layer) is LSTM:
            skipped += r.layer.layers * 4 * r.layer.hidden * r.layer.hidden
    return 2 * skipped


def executed_flops_per_iteration(network, global_batch_size):
    """Training FLOPs the frameworks execute for one mini-batch (see
    EXECUTED_FLOPS_CONVENTION)."""
    return (flops_per_iteration(network, global_batch_size) -
            skipped_flops_per_sample(network) * global_batch_size)


def describe(network):
    """A JSON-ready summary of the network for results and `invoke list`."""
    return {
        "name": network.name,
        "description": network.description,
        "input_shape": list(network.input_shape),
        "classes": network.classes,
        "dataset": network.dataset,
        "parameters": parameter_count(network),
        "forward_flops_per_sample": forward_flops_per_sample(network),
        "executed_flops_per_sample": executed_flops_per_iteration(network, 1),
        "learning_rate": network.learning_rate,
        "momentum": network.momentum,
    }
