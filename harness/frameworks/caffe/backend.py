"""Caffe 1.0 backend: NetSpec nets generated from harness.networks, trained
with Caffe's own SGD solver.

Its translation of every layer kind is in layers.py beside it (re-exported
here); this module holds the versions, the BLAS, the solver and the
training session.

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
import os
import tempfile

from ...gpu import cudalibs
from .. import backends
from ...errors import Unsupported, device_out_of_memory
# The translation lives beside this module; its public names are the
# backend's.
from .layers import (  # noqa: F401
    NAME, TRANSLATORS, conv_padding, conv_size, is_sequence, net_parameter,
    net_spec, planned_shape, planned_shapes, pool_size, subsample_padding)
from .load import _caffe, _numpy
# What a group worker frees between cells (harness.worker).
from .memory import release_memory  # noqa: F401

DEVICES = ("cpu", "gpu")
# FP32 and Caffe's one way to run a net only.
CAPABILITIES = backends.capabilities()

# Debian/Ubuntu packages pycaffe may come from, for provenance.
_PACKAGES = ("python3-caffe-cpu", "python3-caffe-cuda", "libcaffe-cpu1",
             "libcaffe-cuda1")
DPKG_STATUS = "/var/lib/dpkg/status"


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


def math_mode(device):
    """None: Caffe 1.0 has no TF32 switch to read back."""
    return None


def is_out_of_memory(exc):
    """The GPU ran out ("out of memory" from a CUDA check); a host
    std::bad_alloc is an error. A failed CHECK in Caffe aborts the process,
    so only errors raised to Python get here."""
    return device_out_of_memory(exc)


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


def count_parameters(model):
    """Learnable parameters of a solver's net: every blob of every layer but
    BatchNorm's (running mean, variance and their scale factor, learning
    rate 0)."""
    net = model.net
    total = 0
    types = dict((name, layer.type) for name, layer in
                 zip(net._layer_names, net.layers))
    for name, blobs in net.params.items():
        if types.get(name) == "BatchNorm":
            continue
        total += sum(blob.count for blob in blobs)
    return total


def build_model(network, batch_size, device, seed):
    """A solver whose net is the network, initialised by Caffe's fillers
    from `seed` (the data-parallel module trains it)."""
    return make_solver(network, batch_size, device, seed)


# --- training ------------------------------------------------------------------

def feed(net, network, inputs, labels):
    """Copy a mini-batch (batch-major, as harness.data.batches gives it) into
    the net's Input blobs: sequences transposed to Caffe's time-major layout
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
        self.parameters = count_parameters(solver)

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


def batch_arrays(network, batch_size, device, seed, batch=None):
    """The mini-batch (inputs, labels) as numpy arrays, batch-major (Caffe
    copies them into its Input blobs, on any device): `batch` (a
    harness.data.batches.Batch) when given, else drawn from `seed`."""
    return backends.numpy_batch(_numpy(), network, batch_size, seed, batch)


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode=None):
    # FP32 and no compilation only (CAPABILITIES): prepare_options refused
    # any other precision or mode.
    if batch is not None:
        batch_size = batch.input_shape[0]
    solver = build_model(network, batch_size, device, seed)
    inputs, labels = batch_arrays(network, batch_size, device, seed, batch)
    return Session(network, solver, inputs, labels)
