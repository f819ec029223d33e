"""Caffe 1.0 backend: NetSpec nets generated from harness.networks, trained
with Caffe's own SGD solver.

Why this is long: it is one framework's translation of every layer kind of
the ten networks plus its training session.

Caffe runs in its image (Ubuntu 18.04's python3-caffe-cpu: pycaffe on Python
3.6); nothing here may use newer syntax (vermin checks). The fast path a
Caffe user times: the network as a NetParameter (here written by
caffe.NetSpec from the description, never a hand-copied prototxt), one
`solver.step(1)` per iteration (forward, backward and Caffe's SGD update
in C++), the mini-batch held in Input blobs set once before timing. On the
CPU Caffe's own code is single-threaded; the work is in BLAS calls
(convolutions as im2col + GEMM), so the thread count is the BLAS's:
OPENBLAS_NUM_THREADS (harness.threads sets it before Caffe loads) and
openblas_set_num_threads. Which BLAS libblas.so.3 resolved to is read from
the process's mapped libraries and recorded (versions: framework_build).

Where Caffe differs from the description, and what this does about it:
- padding: Caffe pads symmetrically. Symmetric pads are the Convolution's
  own; AlexNet's 11x11/4 (3 before, 4 after) gets its zeros spliced in
  (Concat with constant DummyData blobs) and an unpadded Convolution, so
  the windows sit exactly where the description puts them;
- pooling: Caffe's ceil-mode output size and in-bounds averaging (without
  padding) are the description's;
- batch norm: BatchNorm (running statistics: not parameters, learning rate
  0) followed by Scale with a bias (gamma, beta); moving_average_fraction is
  the description's momentum;
- the LSTM: Caffe's LSTM layer is time-major: the sequences are fed as
  (steps, batch) with the sequence-continuation input `cont` (0 at the first
  step, 1 after), and the output layer is an InnerProduct over axis 2. Its
  parameters per layer are W_xc (4H x input), b_c (4H) and W_hc (4H x H), gates
  in the order i, f, o, g: one bias vector per gate, so the count is the
  description's (PyTorch and MXNet keep a second one; TensorFlow and CNTK
  do not). Glorot limits are drawn per matrix from its own fans;
- the loss: SoftmaxWithLoss normalised over the valid outputs: the mean per
  sample, or per token for the LSTMs.

The shape arithmetic below is plain Python, so tests check it where Caffe
cannot be installed.
"""
import math
import os
import tempfile

from ... import cudalibs
from ... import networks as nets
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory

NAME = "caffe"
DEVICES = ("cpu", "gpu")

# Debian/Ubuntu packages pycaffe may come from, for provenance.
_PACKAGES = ("python3-caffe-cpu", "python3-caffe-cuda", "libcaffe-cpu1",
             "libcaffe-cuda1")
DPKG_STATUS = "/var/lib/dpkg/status"


def _caffe():
    # Imported here so that `harness.frameworks` never loads a framework the
    # cell does not use. glog's INFO lines (every layer Caffe sets up) would
    # drown the log; errors still print.
    os.environ.setdefault("GLOG_minloglevel", "2")
    import caffe
    return caffe


def _numpy():
    import numpy  # pycaffe's own dependency
    return numpy


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


# --- the BLAS --------------------------------------------------------------------

def blas_kind(path):
    """What a loaded libblas.so.3 (its real path) is."""
    if path is None:
        return None
    lowered = path.lower()
    for needle, kind in (("openblas", "OpenBLAS"), ("atlas", "ATLAS"),
                         ("mkl", "MKL"), ("blis", "BLIS")):
        if needle in lowered:
            return kind
    if "/blas/" in lowered:
        return "reference"  # Debian's netlib libblas3
    return "unknown"


def loaded_blas(paths=None):
    """{"library", "kind", "openblas"}: the libblas.so.3 Caffe loaded (the
    path the alternative resolved to) and the OpenBLAS core beside it."""
    paths = cudalibs.loaded_libraries() if paths is None else paths
    blas = cudalibs.find_loaded("libblas", paths)
    openblas = cudalibs.find_loaded("libopenblas", paths)
    if openblas is None:
        openblas = cudalibs.find_loaded("libopenblasp-r0", paths)
    kind = blas_kind(blas)
    if kind is None and openblas is not None:
        kind = "OpenBLAS"
    return {"library": blas, "kind": kind, "openblas": openblas}


def _openblas():
    """The OpenBLAS library loaded in this process (ctypes), or None."""
    import ctypes
    info = loaded_blas()
    for path in (info["library"], info["openblas"]):
        if path and info["kind"] == "OpenBLAS":
            try:
                library = ctypes.CDLL(path)
                library.openblas_get_num_threads  # noqa: B018 (the check)
                return library
            except (OSError, AttributeError):
                continue
    return None


def package_versions(status_path=DPKG_STATUS):
    """{package: version} of the Caffe packages dpkg says are installed."""
    found = {}
    try:
        with open(status_path) as handle:
            text = handle.read()
    except (IOError, OSError):
        return found
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if ":" in line and not line.startswith(" "):
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if (fields.get("Package") in _PACKAGES
                and "installed" in fields.get("Status", "").split()):
            found[fields["Package"]] = fields.get("Version")
    return found


# --- framework-facing interface ---------------------------------------------

def _cuda_build():
    """Whether the loaded Caffe is a CUDA build (it links the CUDA runtime;
    the CPU_ONLY build has no GPU code at all)."""
    return cudalibs.find_loaded("libcudart", cudalibs.loaded_libraries()) \
        is not None


def versions(device):
    caffe = _caffe()
    blas = loaded_blas()
    library = _openblas()
    info = {"framework_version": caffe.__version__, "cuda": None,
            "cudnn": None, "nccl": None,
            "framework_build": {
                "packages": package_versions(),
                "cuda_build": _cuda_build(),
                "blas": blas["kind"],
                "blas_library": blas["library"],
                "openblas_library": blas["openblas"],
                "openblas_threads": (int(library.openblas_get_num_threads())
                                     if library is not None else None),
            }}
    return backends.with_library_versions(info, device, _gpu_versions)


def _gpu_versions():
    return cudalibs.library_versions()


def gpu_count():
    """GPUs the CUDA runtime Caffe loaded sees (0 for a CPU-only build).
    Asked through cudaGetDeviceCount: Caffe's own set_device aborts the
    process on a device that is not there."""
    import ctypes
    path = cudalibs.find_loaded("libcudart", cudalibs.loaded_libraries())
    if path is None:
        return 0
    count = ctypes.c_int(0)
    if ctypes.CDLL(path).cudaGetDeviceCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def configure(threads, device, seed):
    caffe = _caffe()
    if device == "gpu":
        if not _cuda_build():
            raise Unsupported("this Caffe {} is a CPU-only build (no CUDA "
                              "runtime loaded)".format(caffe.__version__))
        caffe.set_device(0)
        caffe.set_mode_gpu()
    else:
        caffe.set_mode_cpu()
    if threads is not None:
        library = _openblas()
        if library is not None:
            library.openblas_set_num_threads(int(threads))
    caffe.set_random_seed(seed)


def effective_threads():
    """OpenBLAS's thread count; 1 for any other BLAS (Caffe's own CPU code
    and the reference BLAS are single-threaded)."""
    library = _openblas()
    if library is None:
        return 1
    return int(library.openblas_get_num_threads())


def is_out_of_memory(exc):
    """The GPU ran out ("out of memory" from a CUDA check); a host
    std::bad_alloc is an error. A failed CHECK in Caffe aborts the process,
    so only errors raised to Python get here."""
    return device_out_of_memory(exc)


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


def solver_parameter(network, net_param, device, seed):
    caffe = _caffe()
    pb = caffe.proto.caffe_pb2
    solver = pb.SolverParameter()
    solver.net_param.CopyFrom(net_param)
    solver.type = "SGD"
    solver.base_lr = network.learning_rate
    solver.momentum = network.momentum
    solver.lr_policy = "fixed"
    solver.weight_decay = 0.0
    solver.max_iter = 2 ** 31 - 1
    solver.display = 0
    solver.snapshot_after_train = False
    solver.random_seed = seed
    solver.solver_mode = (pb.SolverParameter.GPU if device == "gpu"
                          else pb.SolverParameter.CPU)
    return solver


def make_solver(network, batch_size, device, seed):
    """A caffe.SGDSolver for `network` (pycaffe reads solvers from files:
    the parameter is written to a temporary one, removed once read)."""
    caffe = _caffe()
    from google.protobuf import text_format  # pycaffe's own dependency
    solver_param = solver_parameter(network, net_parameter(network, batch_size),
                                    device, seed)
    handle, path = tempfile.mkstemp(prefix="dlrepro-caffe-", suffix=".prototxt")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text_format.MessageToString(solver_param))
        caffe.set_random_seed(seed)
        return caffe.SGDSolver(path)
    finally:
        os.unlink(path)


def count_parameters(net):
    """Learnable parameters: every blob of every layer but BatchNorm's
    (running mean, variance and their scale factor, learning rate 0)."""
    total = 0
    types = dict((name, layer.type) for name, layer in
                 zip(net._layer_names, net.layers))
    for name, blobs in net.params.items():
        if types.get(name) == "BatchNorm":
            continue
        total += sum(blob.count for blob in blobs)
    return total


def build_model(network, batch_size, device="cpu", seed=0):
    """A solver whose net is the network, initialised by Caffe's fillers
    from `seed` (the data-parallel module trains it)."""
    return make_solver(network, batch_size, device, seed)


# --- training ------------------------------------------------------------------

def feed(net, network, inputs, labels):
    """Copy a mini-batch (batch-major, as harness.data gives it) into the
    net's Input blobs: sequences transposed to Caffe's time-major layout
    with `cont` 0 at each sequence's first step. `labels` None: a net
    without a label input."""
    np = _numpy()
    if is_sequence(network):
        steps, batch = net.blobs["data"].data.shape
        net.blobs["data"].data[...] = np.asarray(inputs, np.float32).T
        if labels is not None:
            net.blobs["label"].data[...] = np.asarray(labels, np.float32).T
        cont = np.ones((steps, batch), np.float32)
        cont[0, :] = 0
        net.blobs["cont"].data[...] = cont
    else:
        net.blobs["data"].data[...] = np.asarray(inputs, np.float32)
        if labels is not None:
            net.blobs["label"].data[...] = np.asarray(labels, np.float32)


def batch_major(network, values):
    """An output blob's values with the batch first: sequences' are
    (steps, batch, ...) in Caffe."""
    if is_sequence(network):
        return values.swapaxes(0, 1)
    return values


def forward_net(network, batch_size):
    """A TEST-phase caffe.Net of `network` without label and loss (batch
    norm uses its running statistics), for evaluation; share_with a
    training net gives it that net's trained layers."""
    caffe = _caffe()
    proto = net_spec(network, batch_size, loss=False).to_proto()
    handle, path = tempfile.mkstemp(prefix="dlrepro-caffe-", suffix=".prototxt")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(str(proto))
        return caffe.Net(path, caffe.TEST)
    finally:
        os.unlink(path)


class Session(backends.Session):
    def __init__(self, network, solver, inputs, labels):
        super(Session, self).__init__(network, solver, inputs, labels)
        self.solver = solver
        self.net = solver.net
        feed(self.net, network, inputs, labels)
        self.parameters = count_parameters(self.net)

    def step(self):
        # Forward, backward and the SGD update; on the GPU the loss blob's
        # copy to the host waits for the device.
        self.solver.step(1)
        return float(self.net.blobs["loss"].data)

    def output_shape(self):
        shape = tuple(self.net.blobs["output"].shape)
        if is_sequence(self.network):
            return (shape[0],) + shape[2:]  # (steps, batch, ...) per sample
        return shape[1:]


def data(network, batch_size, seed, batch):
    """(inputs, labels) as numpy arrays, batch-major: random, or the given
    Batch."""
    np = _numpy()
    if batch is not None:
        dtype = np.int64 if is_sequence(network) else np.float32
        inputs = np.frombuffer(batch.inputs, dtype=dtype).reshape(
            batch.input_shape)
        labels = np.frombuffer(batch.labels, dtype=np.int64).reshape(
            batch.label_shape)
        return inputs, labels
    rng = np.random.RandomState(seed)
    shape = (batch_size,) + tuple(network.input_shape)
    if is_sequence(network):
        inputs = rng.randint(0, network.classes, size=shape)
        labels = rng.randint(0, network.classes, size=shape)
    else:
        inputs = rng.standard_normal(shape).astype(np.float32)
        labels = rng.randint(0, network.classes, size=(batch_size,))
    return inputs, labels


def prepare(network, batch_size, device, seed, batch=None):
    if batch is not None:
        batch_size = batch.input_shape[0]
    solver = make_solver(network, batch_size, device, seed)
    inputs, labels = data(network, batch_size, seed, batch)
    return Session(network, solver, inputs, labels)
