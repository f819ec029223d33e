"""CNTK 2.7 backend: C.layers functions built from harness.networks.

Its translation of every layer kind is in layers.py beside it (re-exported
here); this module holds the versions, the devices and the training session.

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
import os

from ...gpu import cudalibs
from .. import backends
from ...errors import HarnessError, Unsupported, device_out_of_memory
# The translation lives beside this module; its public names are the
# backend's.
from .layers import (  # noqa: F401
    NAME, TRANSLATORS, bn_time_constant, build_model, conv_padding,
    conv_size, count_parameters, fans, glorot_limit, input_variables,
    minibatch_plan, planned_shape, planned_shapes, pool_size,
    subsample_padding)
from .load import _cntk, _numpy
# What a group worker frees between cells (harness.worker).
from .memory import release_memory  # noqa: F401

DEVICES = ("cpu", "gpu")
# FP32 and CNTK's one static graph only; why not the others, said in the
# results.
CAPABILITIES = backends.capabilities(not_offered={
    "tf32": "CNTK 2.7 is built with CUDA 10, which predates TF32",
    "bf16": "CNTK 2.7 has no bfloat16 type",
    "fp16": "CNTK 2.7 has no automatic mixed precision (float16 only as the "
            "type of a whole network built by hand, without loss scaling)",
})

# What the cntk-gpu 2.7 wheel ships; recorded, labelled as such, only when
# the loaded libraries cannot be asked.
BUNDLED = {"cuda": "10.0", "cudnn": "7.3.1"}

# The wheels CNTK 2.7 was published as.
_DISTRIBUTIONS = ("cntk", "cntk-gpu")


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


def math_mode(device):
    """None: CNTK 2.7 has no TF32 (CUDA 10) and no switch to read back."""
    return None


def is_out_of_memory(exc):
    """The GPU ran out ("CUDA failure 2: out of memory ; GPU=0"); a host
    std::bad_alloc is an error (harness.frameworks: is_out_of_memory)."""
    return device_out_of_memory(exc)


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


class Session(backends.Session):
    def __init__(self, network, model, features, labels, arguments, samples):
        C = _cntk()
        super(Session, self).__init__(network, model, arguments[features],
                                      arguments[labels])
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


def batch_arrays(network, batch_size, device, seed, batch=None):
    """The mini-batch (inputs, labels) as numpy arrays: `batch` (a
    harness.data.batches.Batch) when given, else drawn from `seed`. CNTK's
    Values on the device need the model's input variables: prepare makes
    them."""
    return backends.numpy_batch(_numpy(), network, batch_size, seed, batch)


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


def prepare(network, batch_size, device, seed, batch=None,
            precision="default", compile_mode=None):
    # FP32 and the static graph only (CAPABILITIES): prepare_options
    # refused any other precision or mode.
    C = _cntk()
    if batch is not None:
        batch_size = batch.input_shape[0]
    model = build_model(network, batch_size, device, seed)
    features, labels = model.arguments[0], input_variables(network)[1]
    inputs, targets = batch_arrays(network, batch_size, device, seed, batch)
    arguments = _device_values(network, features, labels, inputs, targets,
                               C.device.use_default_device())
    return Session(network, model, features, labels, arguments,
                   minibatch_plan(network, batch_size)["samples"])
