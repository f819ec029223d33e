"""CNTK 2.7 backend: C.layers functions built from harness.networks.

Why this is long: it is one framework's translation of every layer kind
of the ten networks plus its training session; split, one translation would
be scattered over files.

CNTK runs only in its image (Python 3.6); nothing here may use newer
syntax or library (vermin checks). The fast path a CNTK expert would time:
one Trainer.train_minibatch per iteration on a minibatch already on the
device, SGD (C.momentum_sgd when the network has momentum), cuDNN through
CNTK's default engines. Reading the minibatch loss back ends the iteration.

Deliberate differences from the 2016 scripts, so that every framework does
the same work:
- the LSTM minibatch is `batch_size` sequences; CNTK counts samples in
  tokens (batch_size x steps), so the learning rate is given for that many
  samples and the update is the mean gradient per token, as elsewhere (the
  2016 scripts asked CNTK for `batch_size` tokens: 1/steps of the work);
- padding is explicit: CNTK's automatic padding is used only where it is
  provably the description's (an odd kernel padded by kernel // 2 on both
  sides), other pads are zeros spliced in; pooling keeps the last partial
  window (ceil_out_dim) and averages only in-bounds values;
- weights are drawn uniform(+-limit) with the description's Glorot limits,
  so CNTK's own fan-in/fan-out conventions cannot differ.

The shape and padding arithmetic below is plain Python, so tests check it
on machines where CNTK cannot be installed.
"""
import math
import os

from ... import cudalibs
from ... import networks as nets
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory

NAME = "cntk"
DEVICES = ("cpu", "gpu")
# No PRECISIONS or COMPILE_MODES: FP32 and CNTK's one static graph only
# (harness.frameworks); why not the others, said in the results.
NOT_OFFERED = {
    "tf32": "CNTK 2.7 is built with CUDA 10, which predates TF32",
    "bf16": "CNTK 2.7 has no bfloat16 type",
    "fp16": "CNTK 2.7 has no automatic mixed precision (float16 only as the "
            "type of a whole network built by hand, without loss scaling)",
}

# What the cntk-gpu 2.7 wheel ships; recorded, labelled as such, only when
# the loaded libraries cannot be asked.
BUNDLED = {"cuda": "10.0", "cudnn": "7.3.1"}

# The wheels CNTK 2.7 was published as.
_DISTRIBUTIONS = ("cntk", "cntk-gpu")


def _cntk():
    # Imported here so that `harness.frameworks` never loads a framework the
    # cell does not use, and so that this module imports (and is tested)
    # where CNTK cannot be installed.
    import cntk
    return cntk


def _numpy():
    import numpy  # CNTK's own dependency
    return numpy


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


# --- framework-facing interface ---------------------------------------------

def _loaded(prefix):
    return cudalibs.find_loaded(prefix, cudalibs.loaded_libraries())


def distribution(C):
    """(name, version) of the installed wheel, e.g. ("cntk", "2.7.post2"):
    cntk.__version__ says only "2.7", which does not tell the
    post-releases apart. Read from the wheel's dist-info beside the package
    (Python 3.6 has no importlib.metadata); None when there is none."""
    site = os.path.dirname(os.path.dirname(os.path.abspath(C.__file__)))
    for entry in sorted(os.listdir(site)):
        name = entry.split("-", 1)[0].lower().replace("_", "-")
        if not entry.endswith(".dist-info") or name not in _DISTRIBUTIONS:
            continue
        with open(os.path.join(site, entry, "METADATA")) as handle:
            for line in handle:
                if line.startswith("Version:"):
                    return name, line.split(":", 1)[1].strip()
    return None


def versions(device):
    C = _cntk()
    wheel = distribution(C)
    info = {"framework_version": wheel[1] if wheel else C.__version__,
            "cuda": None, "cudnn": None, "nccl": None,
            "framework_build": {"distribution": wheel[0] if wheel else None,
                                "module_version": C.__version__}}
    return backends.with_library_versions(info, device, _gpu_versions)


def _gpu_versions():
    found, sources = cudalibs.library_versions(
        fallback=_loaded("libCntk.Core"))
    for key, version in BUNDLED.items():
        if found[key] is None:
            found[key] = version
            sources[key] += ("; recorded the version the cntk-gpu 2.7 wheel "
                             "bundles (known, not read at run time)")
    return found, sources


def _gpus(C):
    return [d for d in C.device.all_devices()
            if d.type() == C.device.DeviceKind.GPU]


def gpu_count():
    return len(_gpus(_cntk()))


def configure(threads, device, seed):
    C = _cntk()
    if device == "gpu":
        gpus = _gpus(C)
        if not gpus:
            raise Unsupported("CNTK {} sees no GPU (a CPU-only wheel or no "
                              "device)".format(C.__version__))
        target = gpus[0]
    else:
        target = C.device.cpu()
    if not C.device.try_set_default_device(target):
        raise HarnessError("CNTK could not make {} its default device (it "
                           "is locked by another process)".format(target))
    if threads is not None:
        # Must precede the Trainer, which otherwise sets the hardware
        # concurrency; the OMP/MKL variables (harness.threads) cover the
        # libraries CNTK loads (its bundled MKL-ML and Intel OpenMP).
        # set_max_num_cputhreads is SWIG's name for
        # CNTK::SetMaxNumCPUThreads in 2.7.
        C.cntk_py.set_max_num_cputhreads(threads)
    C.cntk_py.set_fixed_random_seed(seed)


def effective_threads():
    return int(_cntk().cntk_py.get_max_num_cputhreads())


def is_out_of_memory(exc):
    """The GPU ran out ("CUDA failure 2: out of memory ; GPU=0"); a host
    std::bad_alloc is an error (harness.frameworks: is_out_of_memory)."""
    return device_out_of_memory(exc)


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


def _dense(C, r, x, build, ctx):
    layer = r.layer
    dense = C.layers.Dense(layer.units, init=_uniform(C, glorot_limit(*fans(r))),
                           init_bias=0, **_activation_kwargs(C, layer.activation))
    return dense(x)


def _time_dense(C, r, x, build, ctx):
    # Applied to a sequence, a Dense layer maps every element.
    dense = C.layers.Dense(r.layer.units,
                           init=_uniform(C, glorot_limit(*fans(r))), init_bias=0)
    return dense(x)


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
    return C.layers.Embedding(r.layer.dim, init=_uniform(C, 0.05))(x)


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


def build_model(network, batch_size, features=None):
    """The network as a CNTK Function of `features` (made by
    input_variables when not given). `batch_size` fixes batch norm's time
    constant, which CNTK counts in samples."""
    if features is None:
        features = input_variables(network)[0]
    ctx = {"samples": minibatch_plan(network, batch_size)["samples"]}
    return _build(nets.resolve(network), features, ctx)


def count_parameters(model):
    total = 0
    for parameter in model.parameters:
        total += _product(parameter.shape)
    return total


# --- training ------------------------------------------------------------------

def learner(model, network, samples):
    """SGD with the network's learning rate given per minibatch of
    `samples` (CNTK's count) and its momentum."""
    C = _cntk()
    rate = C.learners.learning_parameter_schedule(
        network.learning_rate, minibatch_size=samples)
    if network.momentum > 0:
        # unit_gain=False: the classic momentum update of the other
        # frameworks (CNTK's unit gain would scale gradients by 1 - m).
        return C.learners.momentum_sgd(
            model.parameters, rate,
            C.learners.momentum_schedule(network.momentum), unit_gain=False)
    return C.learners.sgd(model.parameters, rate)


class Session(object):
    def __init__(self, network, model, features, labels, arguments, samples):
        C = _cntk()
        self.network = network
        self.model = model
        self.features = features
        self.arguments = arguments
        self.parameters = count_parameters(model)
        loss = C.cross_entropy_with_softmax(model, labels)
        self.trainer = C.Trainer(model, loss,
                                 [learner(model, network, samples)])

    def step(self):
        self.trainer.train_minibatch(self.arguments)
        # A copy from the device: the minibatch has been computed.
        return float(self.trainer.previous_minibatch_loss_average)

    def output_shape(self):
        out = self.model.eval({self.features: self.arguments[self.features]})
        if isinstance(out, list):  # one array per sequence
            return tuple(_numpy().shape(out[0]))
        return tuple(out.shape[1:])


def _data(network, batch_size, seed, batch):
    """(inputs, labels) as numpy arrays: random, or the given Batch."""
    np = _numpy()
    if batch is not None:
        dtype = np.int64 if network.input_dtype == "int64" else np.float32
        inputs = np.frombuffer(batch.inputs, dtype=dtype).reshape(
            batch.input_shape)
        labels = np.frombuffer(batch.labels, dtype=np.int64).reshape(
            batch.label_shape)
        return inputs, labels
    rng = np.random.RandomState(seed)
    shape = (batch_size,) + tuple(network.input_shape)
    if network.input_dtype == "int64":
        inputs = rng.randint(0, network.classes, size=shape)
        labels = rng.randint(0, network.classes, size=shape)
    else:
        inputs = rng.standard_normal(shape).astype(np.float32)
        labels = rng.randint(0, network.classes, size=(batch_size,))
    return inputs, labels


def _device_values(network, features, labels, inputs, targets, device):
    """The minibatch as CNTK Values on `device`, made once before timing."""
    C = _cntk()
    np = _numpy()
    if network.input_dtype == "int64":
        return {
            features: C.Value.one_hot(inputs.tolist(), network.classes,
                                      device=device),
            labels: C.Value.one_hot(targets.tolist(), network.classes,
                                    device=device),
        }
    from scipy import sparse  # CNTK's own dependency
    count = targets.shape[0]
    one_hot = sparse.csr_matrix(
        (np.ones(count, dtype=np.float32),
         (np.arange(count), targets.astype(np.int64))),
        shape=(count, network.classes))
    return {
        features: C.Value.create(features, np.ascontiguousarray(inputs),
                                 device=device),
        labels: C.Value.create(labels, one_hot, device=device),
    }


def prepare(network, batch_size, device, seed, batch=None):
    C = _cntk()
    C.cntk_py.set_fixed_random_seed(seed)
    if batch is not None:
        batch_size = batch.input_shape[0]
    features, labels = input_variables(network)
    model = build_model(network, batch_size, features)
    inputs, targets = _data(network, batch_size, seed, batch)
    arguments = _device_values(network, features, labels, inputs, targets,
                               C.device.use_default_device())
    return Session(network, model, features, labels, arguments,
                   minibatch_plan(network, batch_size)["samples"])
