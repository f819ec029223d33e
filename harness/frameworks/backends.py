"""What the framework backends share, written once: the table from layer
kinds to a backend's translators, the versions a result records and the
part of a training Session every backend keeps. Standard library only;
loads no framework.
"""
import collections
import re

from ..gpu import cudalibs
from .. import networks as nets
from ..errors import HarnessError, Unsupported


# What a backend offers beyond the plain contract, declared on one object,
# its module's CAPABILITIES: the harness decides from it alone, before the
# framework is imported (harness.frameworks.prepare_options).
Capabilities = collections.namedtuple(
    "Capabilities", "precisions compile_modes not_offered")
# What a backend offers that declares nothing more.
PLAIN_PRECISIONS = ("default", "fp32")
PLAIN_COMPILE_MODES = ("none",)


def capabilities(precisions=PLAIN_PRECISIONS,
                 compile_modes=PLAIN_COMPILE_MODES, not_offered=None):
    """A backend's CAPABILITIES: the harness.spec.PRECISIONS values it
    implements, its compile modes (the first its default) and
    {value: reason} for the values it lacks."""
    return Capabilities(tuple(precisions), tuple(compile_modes),
                        dict(not_offered or {}))


# A parallel module's CAPABILITIES: how its workers run and whether it
# trains across nodes (harness.frameworks.multi_node_refusal, transport).
ParallelCapabilities = collections.namedtuple(
    "ParallelCapabilities",
    "process_per_worker multi_node workers_per_node transport")


def parallel_capabilities(process_per_worker, multi_node,
                          workers_per_node=None, transport=None):
    """`multi_node`: True, or the reason it cannot train across nodes;
    `workers_per_node`: {device: (most per node, the reason)};
    `transport`: {device: how the nodes' workers talk}."""
    return ParallelCapabilities(bool(process_per_worker), multi_node,
                                dict(workers_per_node or {}),
                                dict(transport or {}))


def compile_mode_or_default(compile_mode, declared):
    """The compile mode prepare() runs: `compile_mode`, or for None the
    backend's default (the first of its `declared` CAPABILITIES)."""
    return declared.compile_modes[0] if compile_mode is None else compile_mode


def translator_name(kind):
    """The name of a backend's translator for layer `kind`: "_" and the
    kind in snake case (Dense -> _dense, GlobalAvgPool -> _global_avg_pool,
    LSTM -> _lstm)."""
    return "_" + re.sub(r"(?<=[a-z])([A-Z])", r"_\1", kind.__name__).lower()


def translators(namespace, framework):
    """Layer kind -> translator, for every kind in networks.LAYER_KINDS,
    from a backend module's `namespace` (its globals()); a kind without one
    is an error when the backend is imported, not when a network needs it."""
    missing = [translator_name(kind) for kind in nets.LAYER_KINDS
               if translator_name(kind) not in namespace]
    if missing:
        raise HarnessError("{} backend has no translator {}".format(
            framework, ", ".join(missing)))
    return dict((kind, namespace[translator_name(kind)])
                for kind in nets.LAYER_KINDS)


def translator(table, layer, framework):
    """The translator `table` has for `layer`'s kind."""
    translate = table.get(type(layer))
    if translate is None:
        raise HarnessError("{} backend cannot build {}".format(
            framework, type(layer).__name__))
    return translate


def with_library_versions(info, device, gpu_versions):
    """`info` with CUDA, cuDNN and NCCL and where each was read: on the GPU
    from gpu_versions() -> (found, sources); on the CPU none apply."""
    if device == "gpu":
        found, sources = gpu_versions()
        info.update(found)
        info["version_sources"] = sources
    else:
        info["version_sources"] = cudalibs.cpu_sources()
    return info


def memory_report(released, held, note):
    """What a backend's release_memory(device, collect) returns: the calls
    it made to free memory (in order), what the framework says it still
    holds (a JSON object, or None where it cannot say) and what that leaves
    unsaid (what the framework keeps whatever it is asked)."""
    return {"released": list(released), "held": held, "note": note}


def nothing_released(owner):
    """What release_memory returns for a framework with no call that frees
    or counts memory: nothing freed, and why; `owner`: what holds the
    memory until its last reference goes."""
    return memory_report([], None, (
        "{} go with its last reference (the worker then collects Python's "
        "garbage); the process's RSS is what it holds".format(owner)))


def attention_of(network, attention):
    """What a result records of `network`'s attention: `attention`, how
    the backend computes it, for a transformer, else None."""
    return attention if nets.Transformer in nets.layer_kinds(network) \
        else None


def subsample_padding(size, stride):
    """Zeros appended so that `size` divides by `stride` (a subsample done
    as a reshape to (size // stride, stride) that keeps index 0)."""
    return -size % stride


# The number of elements of a tensor of `shape`, as networks counts them.
product = nets.elements


class ShapeRules(object):
    """The per-sample output shapes a backend's translation produces, by its
    framework's own rules for a Conv's and a Pool's spatial size (tests
    compare them with networks.resolve). For backends that cannot ask the
    framework for a shape before building (Caffe, CNTK). Sequences are
    per sample (steps, features), like the network description's."""

    def __init__(self, framework, conv_size, pool_size):
        self.framework = framework
        self.conv_size = conv_size
        self.pool_size = pool_size

    def shape(self, r):
        """The output shape of resolved layer `r`."""
        layer, kind = r.layer, type(r.layer)
        shape = r.in_shape
        if kind is nets.Conv:
            return (layer.filters, self.conv_size(shape[1], layer),
                    self.conv_size(shape[2], layer))
        if kind is nets.Pool:
            return (shape[0], self.pool_size(shape[1], layer),
                    self.pool_size(shape[2], layer))
        if kind is nets.SubsamplePad:
            c, h, w = shape
            s = layer.stride
            return (layer.channels, (h + subsample_padding(h, s)) // s,
                    (w + subsample_padding(w, s)) // s)
        if kind is nets.Residual:
            body, shortcut = r.children
            out = self.shapes(body)[-1]
            if shortcut is not None and self.shapes(shortcut)[-1] != out:
                raise HarnessError("residual branches disagree in {}".format(
                    self.framework))
            return out
        if kind is nets.GlobalAvgPool:
            return (shape[0],)
        if kind is nets.Flatten:
            return (product(shape),)
        if kind is nets.Dense:
            return (layer.units,)
        if kind is nets.TimeDense:
            return (shape[0], layer.units)
        if kind is nets.Embedding:
            return (shape[0], layer.dim)
        if kind is nets.LSTM:
            return (shape[0], layer.hidden)
        if kind is nets.Transformer:
            return (shape[0], layer.vocab)
        return shape  # BatchNorm, Activation

    def shapes(self, resolved_layers):
        return [self.shape(r) for r in resolved_layers]


# CPU flags of native float16 arithmetic (x86: Sapphire Rapids and newer).
FP16_CPU_FLAGS = ("avx512_fp16", "amx_fp16")


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's feature flags (an empty set where they cannot be read)."""
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except (IOError, OSError):
        pass
    return set()


def check_cpu_fp16(framework, flags=None):
    """fp16 on a CPU without float16 arithmetic would be emulated (or, in
    oneDNN's LSTM, refused): Unsupported then, with the reason."""
    flags = cpu_flags() if flags is None else flags
    if not any(f in flags for f in FP16_CPU_FLAGS):
        raise Unsupported(
            "fp16 on this CPU: it has no float16 arithmetic ({}), so {} "
            "would emulate it (oneDNN refuses fp16 LSTMs); bf16 is the CPU's "
            "reduced precision".format(" or ".join(FP16_CPU_FLAGS), framework))


def check_precision_off_gpu(precision, device, framework, cpu_tf32):
    """Unsupported for what a CPU does not compute as asked: tf32, a
    tensor-core format (`cpu_tf32` says what the framework does on the CPU
    instead), and fp16 without float16 arithmetic (check_cpu_fp16)."""
    if device == "gpu":
        return
    if precision == "tf32":
        raise Unsupported("tf32 is a tensor-core format of NVIDIA GPUs "
                          "(Ampere and newer); " + cpu_tf32)
    if precision == "fp16":
        check_cpu_fp16(framework)


class Session(object):
    """The network, the model and the mini-batch every backend's Session
    holds; a backend adds `parameters`, step() and output_shape(), and sets
    `loss_scaling` and `precision_note` where it has something to say, and
    `attention` (how a transformer's attention runs) for a transformer."""
    loss_scaling = None
    precision_note = None
    attention = None

    def __init__(self, network, model, inputs, labels):
        self.network = network
        self.model = model
        self.inputs = inputs
        self.labels = labels


def numpy_batch(np, network, batch_size, seed, batch=None):
    """The mini-batch (inputs, labels) as numpy arrays (module `np`),
    batch-major: `batch` (a harness.data.batches.Batch) when given, else drawn
    from `seed` (word ids for a sequence network, else normal inputs)."""
    words = network.input_dtype == "int64"
    if batch is not None:
        inputs = np.frombuffer(batch.inputs, dtype=np.int64 if words else
                               np.float32).reshape(batch.input_shape)
        labels = np.frombuffer(batch.labels, dtype=np.int64).reshape(
            batch.label_shape)
        return inputs, labels
    rng = np.random.RandomState(seed)
    shape = (batch_size,) + tuple(network.input_shape)
    if words:
        return (rng.randint(0, network.classes, size=shape),
                rng.randint(0, network.classes, size=shape))
    return (rng.standard_normal(shape).astype(np.float32),
            rng.randint(0, network.classes, size=(batch_size,)))
