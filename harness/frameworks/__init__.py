"""The backend contract, written here once (docs/DEVELOPING.md and
docs/backends.md point here; tests/backends/test_backend_signatures.py reads every
backend and holds it to the names and signatures below). One package per
framework, loaded by name; importing this package (or a framework's
package) loads no framework, so a container or venv only ever imports its
own. Within a framework's folder, backend.py may re-export what modules
beside it define (layers.py: the translation; load.py: the lazy framework
import); a folder imports nothing from another framework's.

harness/frameworks/<name>/backend.py: model translation and single-process
training, for throughput cells. It provides:
  NAME                      the framework's name
  DEVICES                   the devices it can time ("cpu", "gpu")
  CAPABILITIES              what it offers beyond FP32 without compilation,
                            declared once: backends.capabilities(
                            precisions, compile_modes, not_offered), below
  versions(device)          {"framework_version", "cuda", "cudnn", "nccl"},
                            read from the framework at run time
  configure(threads, device, seed)
                            thread pools, autotuning and seeds; called once
                            before anything is built; the first call that
                            imports the framework
  prepare(network, batch_size, device, seed, batch=None,
          precision="default", compile_mode=None) -> Session
                            build_model, then batch_arrays, on the device;
                            the weights and the batch depend on `seed`
                            alone, so two calls with one seed in one process
                            train identically. compile_mode None: the
                            backend's default (its first compile mode)
  build_model(network, batch_size, device, seed)
                            the model alone, initialised as harness.networks
                            describes from `seed` (the data-parallel module
                            trains it); `batch_size` and `device` where the
                            framework fixes them at build time (CNTK's batch
                            norm, Caffe's net and solver mode, TensorFlow's
                            layout); placing it beyond that is the caller's
  batch_arrays(network, batch_size, device, seed, batch=None)
                            the mini-batch (inputs, labels) as the arrays the
                            framework trains on: `batch` (a
                            harness.data.batches.Batch) when given, else
                            random from `seed`
  count_parameters(model)   build_model's model's parameters, as the
                            framework counts them
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
  math_mode(device)         {"matmul", "conv"}: "fp32" or "tf32", what FP32
                            layers may run as (picks the MFU peak), or None
                            where the backend cannot tell; asked after
                            prepare, so it reports the switches that prepare
                            set for the cell's precision
  release_memory(device, collect)
                            between two cells of a group worker
                            (harness.worker): frees what the framework lets
                            go (its caches, its global state), calling
                            collect() (the worker's one full garbage
                            collection; never gc.collect itself) where what
                            it frees next or reads depends on the cycles
                            the cells left being freed (the worker collects
                            after it where it does not), and returns backends.
                            memory_report(released, held, note): the calls
                            made, what the framework says it still holds (a
                            JSON object, None where it cannot say) and what
                            it keeps whatever it is asked (TensorFlow's and
                            JAX's GPU memory); memory.py beside backend.py
A helper two backends share has one name and one signature in both:
loss(logits, labels), make_optimizer(network).

Precision and compilation (the cell's `precision` and `compile` fields), the
backend's CAPABILITIES (harness.frameworks.backends.capabilities):
  precisions                the harness.spec.PRECISIONS values the backend
                            implements (default: "default", "fp32")
  compile_modes             compile-mode names, the first the framework's
                            default (used when the cell's `compile` is
                            null); "none" always means no compilation
                            (PyTorch: ("none", "default", "reduce-overhead",
                            "max-autotune"); JAX: ("jit",); default:
                            ("none",))
  not_offered               {value: reason} for precisions or modes the
                            framework lacks, said in the `unsupported`
                            result instead of the generic reason
The harness decides from CAPABILITIES before configure() imports the
framework (prepare_options): a precision or mode the backend does not list
makes the cell `unsupported` with the reason; prepare() then receives
`precision=` (the value as asked, "default" included) and `compile_mode=`
(the mode resolved: never null). A backend that offers a value on one
device only (TF32 on the GPU) raises harness.errors.Unsupported from
prepare before it builds anything. Strict "fp32" must switch TF32 and
reduced-precision reductions off and check that they are off (math_mode
must then report fp32 for both, which the harness verifies). Compilation
happens in the first iterations, which the warm-up covers; the result's
`compilation` block says how long they took.

A Session (a backends.Session) has `parameters` (count_parameters of its
model), `step()` (one training iteration; returns the loss as a float once
the device has finished) and `output_shape()` (per-sample output shape of a
forward pass); `loss_scaling` (how fp16 losses are scaled) and
`precision_note` (what the backend knows about the arithmetic beyond its
switches, e.g. that the device computes bf16 products in FP32), None unless
the backend sets them, are recorded in the result's `precision` block.

harness/frameworks/<name>/parallel.py: data-parallel training for
convergence runs. It provides:
  NAME, DEVICES, gpu_count() the backend's
  MECHANISM              {device: how workers run and gradients combine},
                         recorded in every result
  CAPABILITIES           backends.parallel_capabilities(process_per_worker,
                         multi_node, workers_per_node, transport), below
  train(plan, data, log) -> Curves
                         trains plan["epochs"] epochs with plan["workers"]
                         workers and the global batch fixed; `data` is a
                         harness.data.datasets.Loaded (modules that start
                         worker processes reload it there from
                         plan["data"])
Its CAPABILITIES:
  process_per_worker     True when each worker is its own process (the
                         cell's threads are then shared out among them)
  multi_node             True when train() runs one node's part of a
                         multi-node run (a convergence spec's "nodes" > 1,
                         docs/multinode.md), else the reason it cannot
  workers_per_node       {device: (most workers per node, the reason for no
                         more)}, e.g. one TensorFlow worker process per node
                         on the CPU; empty: no limit
  transport              {device: how the nodes' workers talk}, formatted
                         with {interface}; recorded in the result's
                         convergence.cluster.transport
The harness decides from these before train() imports the framework
(multi_node_refusal). On a node, plan["nodes"], plan["node_rank"],
plan["workers_per_node"] and plan["cluster"] (harness.spec.validate_cluster)
say where it stands: it trains the workers of global ranks
node_rank * workers_per_node + i, with plan["workers"] the total, so that
the sharding of every global batch is that of one node with all workers;
its curves are the global batch's losses, the same on every node.

Every parallel module builds its model with its backend's `build_model`
and runs the shared epoch loop of harness.frameworks.dataparallel, so
sample order, batch splitting, timing and evaluation are the same in every
framework; the processes a launcher starts are harness.frameworks.children's;
what the backends share is in harness.frameworks.backends.
"""
import importlib

from ..errors import HarnessError, Unsupported
from ..spec import FRAMEWORKS

# Defined in harness.spec, which validates cells and must not import this
# package (the host imports harness.spec).
NAMES = FRAMEWORKS
PARTS = ("backend", "parallel")


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
    else the reason it cannot. Reads its CAPABILITIES only."""
    if nodes <= 1:
        return None
    declared = module.CAPABILITIES
    if declared.multi_node is not True:
        return declared.multi_node or (
            "{} data parallelism runs on one node only".format(module.NAME))
    limit = declared.workers_per_node.get(device)
    if limit is not None and workers_per_node > limit[0]:
        return "{} workers per node asked for: {}".format(workers_per_node,
                                                          limit[1])
    return None


def transport(module, device, interface):
    """How the nodes' workers talk (the module's declared transport), or
    None."""
    text = module.CAPABILITIES.transport.get(device)
    if text is None:
        return None
    return text.format(interface=interface or
                       "the interface of the route to the coordinator")


def offered(backend):
    """(precisions, compile modes) the backend offers (its CAPABILITIES)."""
    declared = backend.CAPABILITIES
    return declared.precisions, declared.compile_modes


def resolve_compile(backend, requested):
    """The compile mode a cell runs: the requested one, or the framework's
    default (the first of its compile modes) for null."""
    return requested if requested is not None else offered(backend)[1][0]


def prepare_options(backend, precision, compile_mode):
    """The keyword arguments prepare() gets for a cell's precision and
    compile mode; Unsupported, with the reason, for what the backend does
    not offer. Reads its CAPABILITIES only: call it before configure()."""
    precisions, modes = offered(backend)
    notes = backend.CAPABILITIES.not_offered
    mode = resolve_compile(backend, compile_mode)
    for value, values, what in ((precision, precisions, "precision"),
                                (mode, modes, "compile mode")):
        if value not in values:
            raise Unsupported(notes.get(value) or (
                "the {} backend offers {} {} only, not {!r}".format(
                    backend.NAME, what, ", ".join(values), value)))
    return {"precision": precision, "compile_mode": mode}
