"""One package per framework, loaded by name; importing this package (or a
framework's package) loads no framework, so a container or venv only ever
imports its own.

harness/frameworks/<name>/backend.py: model translation and single-process
training, for throughput cells. It provides:
  NAME                      the framework's name
  DEVICES                   the devices it can time ("cpu", "gpu")
  versions(device)          {"framework_version", "cuda", "cudnn", "nccl"},
                            read from the framework at run time
  configure(threads, device, seed)
                            thread pools, autotuning and seeds; called once
                            before anything is built; the first call that
                            imports the framework
  prepare(network, batch_size, device, seed, batch=None) -> Session
                            builds the network from harness.networks and a
                            mini-batch on the device (random unless `batch`,
                            a harness.data.Batch, is given); the weights and
                            the batch depend on `seed` alone, so two calls
                            with one seed in one process train identically
  build_model(network, ...) the model alone, initialised as described (the
                            data-parallel module trains it)
  effective_threads()       the intra-op thread count the framework uses
  gpu_count()               GPUs the framework sees
  is_out_of_memory(exc)     whether an exception means the DEVICE (the GPU)
                            ran out of memory: status `oom`. A failed host
                            allocation (Python's MemoryError, PyTorch's
                            DefaultCPUAllocator, TensorFlow's cpu allocator,
                            std::bad_alloc) is status `error`: the machine
                            ran short, which says nothing about whether the
                            cell fits the device it measures. Decided from
                            the exception's text (harness.errors.
                            device_out_of_memory) without importing the
                            framework, which may be what failed to import.
  math_mode(device)         optional: {"matmul", "conv"}: "fp32" or "tf32",
                            what FP32 layers may run as (picks the MFU peak);
                            asked after prepare, so it reports the switches
                            that prepare set for the cell's precision

Precision and compilation (the cell's `precision` and `compile` fields):
  PRECISIONS                optional: the harness.spec.PRECISIONS values the
                            backend implements ("default", "fp32", "tf32",
                            "bf16", "fp16")
  COMPILE_MODES             optional: tuple of compile-mode names, the first
                            the framework's default (used when the cell's
                            `compile` is null); "none" always means no
                            compilation (PyTorch: ("none", "default",
                            "reduce-overhead", "max-autotune"); JAX: ("jit",))
  NOT_OFFERED               optional: {value: reason} for precisions or modes
                            the framework lacks, said in the `unsupported`
                            result instead of the generic reason
The harness decides before configure() imports the framework: a precision
or mode the backend does not list makes the cell `unsupported` with the
reason. A backend declaring neither attribute keeps working unchanged: its
cells accept precision "default" or "fp32" and compile null or "none"
only. prepare() receives `precision=` (the value as asked, "default"
included) only when the backend declares PRECISIONS, and `compile_mode=`
(the mode resolved: never null) only when it declares COMPILE_MODES. A
backend that offers a value on one device only (TF32 on the GPU) raises
harness.errors.Unsupported from prepare before it builds anything. Strict
"fp32" must switch TF32 and reduced-precision reductions off and check
that they are off (math_mode must then report fp32 for both, which the
harness verifies). Compilation happens in the first iterations, which the
warm-up covers; the result's `compilation` block says how long they took.

A Session has `parameters` (as the framework counts them), `step()` (one
training iteration; returns the loss as a float once the device has
finished) and `output_shape()` (per-sample output shape of a forward pass);
optionally `loss_scaling` (how fp16 losses are scaled) and `precision_note`
(what the backend knows about the arithmetic beyond its switches, e.g. that
the device computes bf16 products in FP32), both recorded in the result's
`precision` block.

harness/frameworks/<name>/parallel.py: data-parallel training for
convergence runs. It provides:
  NAME                   the framework's name
  DEVICES                the devices it can train on ("cpu", "gpu")
  PROCESS_PER_WORKER     True when each worker is its own process (the
                         cell's threads are then shared out among them)
  MECHANISM              {device: how workers run and gradients combine},
                         recorded in every result
  gpu_count()            GPUs the framework sees (NAME, DEVICES and this
                         are the backend's)
  train(plan, data, log) -> Curves
                         trains plan["epochs"] epochs with plan["workers"]
                         workers and the global batch fixed; `data` is a
                         harness.datasets.Loaded (modules that start worker
                         processes reload it there from plan["data"])

Across nodes (a convergence spec's "nodes" > 1, docs/multinode.md):
  MULTI_NODE             True when train() runs one node's part of a
                         multi-node run, else a string: the reason it
                         cannot (absent: "<name> data parallelism runs on
                         one node only")
  WORKERS_PER_NODE       optional: {device: (most workers per node, the
                         reason for no more)}, e.g. one TensorFlow worker
                         process per node on the CPU
  TRANSPORT              {device: how the nodes' workers talk}, formatted
                         with {interface}; recorded in the result's
                         convergence.cluster.transport
The harness decides from these attributes before train() imports the
framework (multi_node_refusal). On a node, plan["nodes"], plan["node_rank"],
plan["workers_per_node"] and plan["cluster"] (harness.spec.validate_cluster)
say where it stands: it trains the workers of global ranks
node_rank * workers_per_node + i, with plan["workers"] the total, so that
the sharding of every global batch is that of one node with all workers;
its curves are the global batch's losses, the same on every node.

Every parallel module builds its model with its backend's `build_model`
and runs the shared epoch loop of harness.frameworks.dataparallel, so
sample order, batch splitting, timing and evaluation are the same in every
framework; what the backends share is in harness.frameworks.backends.
"""
import importlib

from ..errors import HarnessError, Unsupported
from ..spec import FRAMEWORKS

# Defined in harness.spec, which validates cells and must not import this
# package (the host imports harness.spec).
NAMES = FRAMEWORKS
PARTS = ("backend", "parallel")
# What a backend that declares no PRECISIONS or COMPILE_MODES offers.
PLAIN_PRECISIONS = ("default", "fp32")
PLAIN_COMPILE_MODES = ("none",)


def load(name, part="backend"):
    """Import framework `name`'s `part` module (it loads the framework
    itself only when first used)."""
    if name not in NAMES:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            name, ", ".join(NAMES)))
    if part not in PARTS:
        raise HarnessError("unknown part {!r} of a framework; valid parts: "
                           "{}".format(part, ", ".join(PARTS)))
    return importlib.import_module("{}.{}.{}".format(__name__, name, part))


def multi_node_refusal(module, nodes, workers_per_node, device):
    """None when the parallel `module` can run this node's part of a run
    over `nodes` nodes with `workers_per_node` workers each on `device`,
    else the reason it cannot. Reads module attributes only."""
    if nodes <= 1:
        return None
    support = getattr(module, "MULTI_NODE", None)
    if support is not True:
        return support or "{} data parallelism runs on one node only".format(
            module.NAME)
    limit = getattr(module, "WORKERS_PER_NODE", {}).get(device)
    if limit is not None and workers_per_node > limit[0]:
        return "{} workers per node asked for: {}".format(workers_per_node,
                                                          limit[1])
    return None


def transport(module, device, interface):
    """How the nodes' workers talk (the module's TRANSPORT), or None."""
    text = getattr(module, "TRANSPORT", {}).get(device)
    if text is None:
        return None
    return text.format(interface=interface or
                       "the interface of the route to the coordinator")


def offered(backend):
    """(precisions, compile modes) the backend offers (see the contract
    above)."""
    return (tuple(getattr(backend, "PRECISIONS", PLAIN_PRECISIONS)),
            tuple(getattr(backend, "COMPILE_MODES", PLAIN_COMPILE_MODES)))


def resolve_compile(backend, requested):
    """The compile mode a cell runs: the requested one, or the framework's
    default (the first of its COMPILE_MODES) for null."""
    return requested if requested is not None else offered(backend)[1][0]


def prepare_options(backend, precision, compile_mode):
    """The keyword arguments prepare() gets for a cell's precision and
    compile mode; Unsupported, with the reason, for what the backend does
    not offer. Reads module attributes only: call it before configure()."""
    precisions, modes = offered(backend)
    notes = getattr(backend, "NOT_OFFERED", {})
    mode = resolve_compile(backend, compile_mode)
    for value, values, what in ((precision, precisions, "precision"),
                                (mode, modes, "compile mode")):
        if value not in values:
            raise Unsupported(notes.get(value) or (
                "the {} backend offers {} {} only, not {!r}".format(
                    backend.NAME, what, ", ".join(values), value)))
    kwargs = {}
    if hasattr(backend, "PRECISIONS"):
        kwargs["precision"] = precision
    if hasattr(backend, "COMPILE_MODES"):
        kwargs["compile_mode"] = mode
    return kwargs
