"""The JAX backend's translation of harness.networks into plain JAX: one
translator per layer kind, the model and its parameter count."""
import math

from ... import networks as nets
from .. import backends, draws
from .load import _jax, _np

NAME = "jax"


# --- translation -------------------------------------------------------------
#
# Each translator returns a Layer: init(key) -> (params, state) and
# apply(params, state, x, train) -> (y, state). Images are NHWC; params of a
# layer are a dict (empty when it has none), state holds batch-norm running
# statistics.
#
# Initial values are drawn on the host with numpy, from a key that is a
# numpy SeedSequence (split: spawn), and put on the device once (Model); on
# the CPU the device takes the aligned buffers as they are, without a copy
# of fcn5's 472 MB.
# JAX compiles every op run outside jit once per shape: drawing each
# weight with jax.random compiled ~60 small programs for resnet50, 6.5 of
# its 8.9 s of model build on one core, again in every cell. What is timed,
# the jitted step, does not change; the distributions are those of
# harness.networks, deterministic per seed.


def _split(key, count=2):
    return key.spawn(count)


def _uniform(key, shape, limit):
    """float32 values in [-limit, limit], drawn into an aligned buffer that
    the device takes without a copy (harness.frameworks.draws)."""
    return draws.uniform(key, shape, limit)


def _zeros(shape):
    values = draws.aligned_empty(shape)
    values.fill(0)
    return values


def _ones(shape):
    values = draws.aligned_empty(shape)
    values.fill(1)
    return values


class Layer(object):
    def __init__(self, init, apply):
        self.init = init
        self.apply = apply


def _stateless(apply, init=None):
    """A Layer whose apply(params, x) keeps no state."""
    return Layer(init or (lambda key: ({}, {})),
                 lambda params, state, x, train: (apply(params, x), state))


def _glorot(key, shape, fan_in, fan_out):
    return _uniform(key, shape, math.sqrt(6.0 / (fan_in + fan_out)))


def _activate(name, x):
    jnn = _jax().nn
    if name is None:
        return x
    return {"relu": jnn.relu, "sigmoid": jnn.sigmoid}[name](x)


def _linear(inputs, units, activation=None):
    def init(key):
        return {"w": _glorot(key, (inputs, units), inputs, units),
                "b": _zeros((units,))}, {}

    return _stateless(lambda p, x: _activate(activation, x @ p["w"] + p["b"]),
                      init)


def _dense(r, build):
    return _linear(r.in_shape[0], r.layer.units, r.layer.activation)


def _time_dense(r, build):
    # x @ w acts on the last axis: one projection per time step.
    return _linear(r.in_shape[1], r.layer.units)


def _conv(r, build):
    jax = _jax()
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
            params["b"] = _zeros((layer.filters,))
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
        return ({"gamma": _ones((channels,)), "beta": _zeros((channels,))},
                {"mean": _zeros((channels,)), "var": _ones((channels,))})

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

    def init(key):
        body_key, shortcut_key = _split(key)
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
    layer = r.layer

    def init(key):
        return {"table": _uniform(key, (layer.vocab, layer.dim), 0.05)}, {}

    return _stateless(lambda p, x: p["table"][x], init)


def _lstm(r, build):
    jax = _jax()
    jnp = jax.numpy
    layer = r.layer
    hidden = layer.hidden
    sizes = [r.in_shape[1]] + [hidden] * (layer.layers - 1)

    def init(key):
        params = []
        for inputs, key in zip(sizes, _split(key, layer.layers)):
            ih_key, hh_key = _split(key)
            # Gates i, f, g, o side by side; one bias vector per gate
            # (parameter_count's convention), zero, forget gate included.
            params.append({
                "w_ih": _glorot(ih_key, (inputs, 4 * hidden), inputs,
                                4 * hidden),
                "w_hh": _glorot(hh_key, (hidden, 4 * hidden), hidden,
                                4 * hidden),
                "b": _zeros((4 * hidden,))})
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


def _transformer(r, build):
    # Its own module (the block, the tied table); it reads this module's
    # initialisers, hence imported here, not at the top.
    import sys
    from . import transformer
    return transformer.build(r, sys.modules[__name__])


# Layer kind -> translator(resolved, build) returning a Layer: _dense for
# nets.Dense and so on (backends.translator_name).
TRANSLATORS = backends.translators(globals(), NAME)


def _sequence(resolved_layers):
    layers = [backends.translator(TRANSLATORS, r.layer, NAME)(r, _sequence)
              for r in resolved_layers]

    def init(key):
        params, state = [], []
        for layer, key in zip(layers, _split(key, len(layers))):
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

    def __init__(self, network, seed, device=None):
        layer = _sequence(nets.resolve(network))
        self.apply = layer.apply
        self.params, self.state = layer.init(_np().random.SeedSequence(seed))
        if device is not None:
            # One transfer, committed to the device as the mini-batch is: a
            # step whose inputs are committed differently from its outputs
            # is compiled again at its second call. Without a device the
            # values stay numpy, for a caller that shards them.
            self.params, self.state = _jax().device_put(
                (self.params, self.state), device)


def build_model(network, batch_size, device, seed):
    """The network, initialised as described from `seed`: Glorot-uniform
    weights, zero biases, batch-norm gamma 1 and beta 0, embeddings
    uniform(-0.05, 0.05), committed to `device` (`batch_size` changes
    nothing in JAX's build)."""
    return Model(network, seed, target(device))


def target(device):
    """The JAX device a cell's arrays are committed to."""
    return _jax().devices("gpu" if device == "gpu" else "cpu")[0]


def count_parameters(model):
    return sum(int(leaf.size)
               for leaf in _jax().tree_util.tree_leaves(model.params))


def input_shape(network):
    """Per-sample input shape as the model takes it: images NHWC (the
    description is channels-first)."""
    shape = tuple(network.input_shape)
    if len(shape) == 3:
        return shape[1:] + shape[:1]
    return shape

