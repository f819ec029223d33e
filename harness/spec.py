"""What a run is asked to do: the fields of a throughput cell and of a
convergence spec, and their checks. Pure: imports no framework, no NVML and
no runner, so that the host validates and plans with the same code the
harness refuses bad input with, in the same words.
"""
import ipaddress
import re

from . import networks
from .data import datasets
from .gpu import clocks
from .errors import HarnessError

# The frameworks with a package under harness/frameworks (kept here, not
# there, so that validating a cell imports no framework code).
FRAMEWORKS = ("caffe", "cntk", "jax", "mxnet", "pytorch", "tensorflow")
DEVICES = ("cpu", "gpu")
# Where the harness runs (native venv, docker, and more to come: podman,
# charliecloud, under slurm): a name, recorded, never interpreted here.
RUNTIME_PATTERN = re.compile(r"^[a-z0-9-]+$")

# The fields of a cell, in the order results list them. Together they are
# the cell's identity: a resumed run skips a cell only when all are equal.
CELL_FIELDS = ("framework", "profile", "network", "dataset", "batch_size",
               "global_batch_size", "device", "gpus", "threads", "iterations",
               "warmup", "runtime", "seed", "clock_policy", "precision",
               "compile")
# Cell fields a framework reads once per process: its import and build
# (framework, profile, runtime), the device it opens and how many GPUs,
# thread pools (set at import), math switches and compilers that some
# frameworks set globally, the GPU clocks, the seed its configure() sets.
# Cells equal in all of them may share a process (harness.worker); the
# host forms its groups from them.
PROCESS_FIELDS = ("framework", "profile", "runtime", "device", "gpus",
                  "threads", "precision", "compile", "clock_policy", "seed")
# Spec keys that describe the process's place: the container and the stack.
PROCESS_SPEC_KEYS = ("container", "stack")
# Arithmetic a cell trains in: the framework's default (recorded as what it
# resolves to), strict FP32 (TF32 and reduced-precision reductions off),
# TF32 tensor cores for FP32 layers, or automatic mixed precision (bf16;
# fp16 with loss scaling). harness.frameworks says which backend offers what.
PRECISIONS = ("default", "fp32", "tf32", "bf16", "fp16")
# Fields a cell spec may leave out, and what they then are: specs written
# before the fields existed read as the framework's defaults. compile None:
# the framework's default mode (its backend's COMPILE_MODES[0]).
CELL_DEFAULTS = {"precision": "default", "compile": None}
COMPILE_PATTERN = re.compile(r"^[a-z0-9-]+$")

# Seeds every framework takes as they are: mx.random.seed passes its seed
# as a C int (a larger one wraps around silently, so two seeds would give
# one stream), and TensorFlow and JAX seed the synthetic batch with seed + 1.
MAX_SEED = 2 ** 31 - 2
# The most elements a tensor may hold: Caffe counts a blob's elements in an
# int and MXNet's default build indexes tensors with 32-bit integers; the
# others index with 64-bit integers. A batch past it fails in the framework.
TENSOR_ELEMENT_LIMITS = {"caffe": 2 ** 31 - 1, "mxnet": 2 ** 31 - 1}
TENSOR_ELEMENT_LIMIT = 2 ** 63 - 1

CONVERGENCE_FIELDS = ("framework", "profile", "network", "device", "workers",
                      "global_batch_size", "epochs", "seed", "threads",
                      "runtime", "clock_policy", "data", "target_loss",
                      "nodes")
# Fields a convergence spec may leave out: specs and run folders written
# before multi-node runs trained on one node.
CONVERGENCE_DEFAULTS = {"nodes": 1}
DATA_SOURCES = ("files", "synthetic")
# The harness spec's "cluster" object (docs/multinode.md): where this node
# stands in a multi-node run. The Slurm executor writes it per node;
# timeout_s (optional) bounds the rendezvous and every collective.
CLUSTER_FIELDS = ("nodes", "node_rank", "hosts", "addresses", "coordinator",
                  "port", "interface", "network")
CLUSTER_OPTIONAL = ("timeout_s",)
CLUSTER_TIMEOUT_S = 300
# A framework may use the ports port..port+CLUSTER_PORTS-1.
CLUSTER_PORTS = 10
NO_CLUSTER = ("a multi-node run needs its cluster (the Slurm executor "
              "writes it)")


def check_integer(spec, key, minimum=1, optional=False, maximum=None):
    value = spec.get(key)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise HarnessError("{} must be an integer >= {}, got {!r}".format(
            key, minimum, value))
    if maximum is not None and value > maximum:
        raise HarnessError("{} must be at most {}, got {}".format(
            key, maximum, value))


def max_batch(framework, network):
    """The largest per-process batch of `network` (a name) whose tensors
    `framework` can index (TENSOR_ELEMENT_LIMITS)."""
    limit = TENSOR_ELEMENT_LIMITS.get(framework, TENSOR_ELEMENT_LIMIT)
    return limit // networks.largest_tensor(networks.get(network))


def check_batch(batch, framework, network, what="batch_size"):
    limit = max_batch(framework, network)
    if batch > limit:
        raise HarnessError(
            "{} {} is too large for {} in {}: its largest tensor would hold "
            "more elements than {} can index; at most {}".format(
                what, batch, network, framework, framework, limit))


def check_fields(spec, fields, what, label):
    """`spec` is a JSON object with exactly `fields` (`what` names it in
    the error, `label` its fields)."""
    if not isinstance(spec, dict):
        raise HarnessError("{} must be a JSON object, got {!r}".format(
            what, spec))
    missing = [k for k in fields if k not in spec]
    unknown = sorted(set(spec) - set(fields))
    if missing or unknown:
        raise HarnessError("{} fields: missing {}, unknown {}".format(
            label, missing or "none", unknown or "none"))


def check_framework(name):
    if name not in FRAMEWORKS:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            name, ", ".join(FRAMEWORKS)))


def check_precision(value):
    if value not in PRECISIONS:
        raise HarnessError("precision must be one of {}, got {!r}".format(
            ", ".join(PRECISIONS), value))


def check_compile(value):
    """A compile mode is null (the framework's default) or a plain name;
    which names a framework knows is its backend's COMPILE_MODES."""
    if value is not None and (not isinstance(value, str) or
                              not COMPILE_PATTERN.match(value)):
        raise HarnessError("compile must be a mode name (none, default, "
                           "xla, ...) or null, got {!r}".format(value))


def check_placement(spec):
    """The spec's device is a known one and its runtime a plain name."""
    if spec["device"] not in DEVICES:
        raise HarnessError("device must be one of {}, got {!r}".format(
            ", ".join(DEVICES), spec["device"]))
    runtime = spec["runtime"]
    if not isinstance(runtime, str) or not RUNTIME_PATTERN.match(runtime):
        raise HarnessError("runtime must be a name of lowercase letters, "
                           "digits and '-' (native, docker, ...), got "
                           "{!r}".format(runtime))


def validate_cell(cell):
    """Check a cell spec; returns it with its fields in canonical order."""
    if isinstance(cell, dict):
        cell = dict(CELL_DEFAULTS, **cell)
    check_fields(cell, CELL_FIELDS, "a cell", "cell")
    check_framework(cell["framework"])
    networks.get(cell["network"])
    check_placement(cell)
    for key in ("batch_size", "global_batch_size", "iterations"):
        check_integer(cell, key)
    check_integer(cell, "warmup", minimum=0)
    check_integer(cell, "gpus", minimum=0)
    check_integer(cell, "seed", minimum=0, maximum=MAX_SEED)
    check_integer(cell, "threads", optional=True)
    clocks.parse_policy(cell["clock_policy"])
    check_precision(cell["precision"])
    check_compile(cell["compile"])
    if cell["compile"] not in (None, "none") and cell["warmup"] < 1:
        raise HarnessError("compile {!r} compiles in the first iteration: "
                           "give warmup >= 1 so that no timed iteration "
                           "includes it".format(cell["compile"]))
    check_batch(cell["batch_size"], cell["framework"], cell["network"])
    workers = max(cell["gpus"], 1)
    if cell["global_batch_size"] != cell["batch_size"] * workers:
        raise HarnessError("global_batch_size must be batch_size x workers "
                           "({} x {}), got {}".format(
                               cell["batch_size"], workers,
                               cell["global_batch_size"]))
    if cell["device"] == "cpu" and cell["gpus"] != 0:
        raise HarnessError("a cpu cell uses 0 gpus, got {}".format(cell["gpus"]))
    return dict((k, cell[k]) for k in CELL_FIELDS)


def check_split(global_batch, workers):
    """The global batch must split into equal, non-empty worker parts."""
    if workers > global_batch:
        raise HarnessError("{} workers cannot share a global batch of {} "
                           "samples: each worker needs at least one".format(
                               workers, global_batch))
    if global_batch % workers:
        raise HarnessError("a global batch of {} does not split evenly over "
                           "{} workers; use a multiple of {}".format(
                               global_batch, workers, workers))


def _validate_data(data, network):
    if not isinstance(data, dict) or data.get("source") not in DATA_SOURCES:
        raise HarnessError("data must be {{\"source\": one of {}, ...}}, got "
                           "{!r}".format(", ".join(DATA_SOURCES), data))
    name = datasets.for_network(network)
    if data.get("name", name) != name:
        raise HarnessError("{} trains on {}, not {}".format(
            network, name, data.get("name")))
    for key in ("train_samples", "test_samples"):
        check_integer(data, key, 1, optional=True)
    if data["source"] == "files":
        if not isinstance(data.get("dir"), str) or not data["dir"]:
            raise HarnessError("data.dir must name the data folder")
    elif data.get("checksums") is not None:
        raise HarnessError("synthetic data has no checksums")
    checked = dict(data)
    checked["name"] = name
    return checked


def validate_convergence(spec):
    """Check a convergence spec (CONVERGENCE_FIELDS); returns it with
    defaults filled in."""
    if isinstance(spec, dict):
        spec = dict(CONVERGENCE_DEFAULTS, **spec)
    check_fields(spec, CONVERGENCE_FIELDS, "a convergence spec",
                 "convergence")
    check_framework(spec["framework"])
    networks.get(spec["network"])
    if datasets.for_network(spec["network"]) is None:
        raise HarnessError("{} trains on synthetic data only; convergence "
                           "networks: {}".format(
                               spec["network"],
                               ", ".join(sorted(datasets.NETWORK_DATASETS))))
    check_placement(spec)
    for key, minimum in (("workers", 1), ("global_batch_size", 1),
                         ("epochs", 1), ("seed", 0), ("nodes", 1)):
        check_integer(spec, key, minimum)
    check_integer(spec, "threads", 1, optional=True)
    check_integer(spec, "seed", 0, maximum=MAX_SEED)
    if spec["workers"] % spec["nodes"]:
        raise HarnessError("{} workers do not split evenly over {} nodes; "
                           "workers is the total, a multiple of nodes".format(
                               spec["workers"], spec["nodes"]))
    if clocks.parse_policy(spec["clock_policy"]).name != clocks.OBSERVE:
        # The workers run in their own processes for the whole training:
        # clocks are observed, never set, here.
        raise HarnessError("convergence runs observe GPU clocks only; "
                           "clock_policy {!r} is for throughput cells".format(
                               spec["clock_policy"]))
    check_split(spec["global_batch_size"], spec["workers"])
    check_batch(spec["global_batch_size"] // spec["workers"],
                spec["framework"], spec["network"], "a worker's batch")
    target = spec["target_loss"]
    if target is not None and (isinstance(target, bool) or
                               not isinstance(target, (int, float)) or
                               not target > 0):
        raise HarnessError("target_loss must be a positive number or null, "
                           "got {!r}".format(target))
    checked = dict(spec)
    checked["data"] = _validate_data(spec["data"], spec["network"])
    return checked


def validate_cluster(cluster, conv):
    """Check the harness spec's "cluster" object against the validated
    convergence spec `conv`; returns it with timeout_s filled in, or None
    for a one-node run without one. A multi-node run needs it."""
    if cluster is None:
        if conv["nodes"] > 1:
            raise HarnessError(NO_CLUSTER)
        return None
    if not isinstance(cluster, dict):
        raise HarnessError("cluster must be a JSON object, got {!r}".format(
            cluster))
    check_fields(dict((k, v) for k, v in cluster.items()
                      if k not in CLUSTER_OPTIONAL),
                 CLUSTER_FIELDS, "cluster", "cluster")
    nodes = cluster["nodes"]
    check_integer(cluster, "nodes")
    if nodes != conv["nodes"]:
        raise HarnessError("cluster.nodes is {}, the convergence spec asks "
                           "for {} nodes".format(nodes, conv["nodes"]))
    check_integer(cluster, "node_rank", 0)
    if cluster["node_rank"] >= nodes:
        raise HarnessError("cluster.node_rank must be below nodes ({}), got "
                           "{}".format(nodes, cluster["node_rank"]))
    for key in ("hosts", "addresses"):
        values = cluster[key]
        if not isinstance(values, list) or len(values) != nodes or not all(
                isinstance(v, str) and v for v in values):
            raise HarnessError("cluster.{} must list {} names, one per node in "
                               "rank order, got {!r}".format(key, nodes, values))
    for address in cluster["addresses"]:
        _check_ipv4(address)
    if cluster["coordinator"] != cluster["addresses"][0]:
        raise HarnessError("cluster.coordinator must be the address of rank "
                           "0 ({}), got {!r}".format(cluster["addresses"][0],
                                                     cluster["coordinator"]))
    port = cluster["port"]
    if isinstance(port, bool) or not isinstance(port, int) or \
            not 1 <= port <= 65536 - CLUSTER_PORTS:
        raise HarnessError("cluster.port must be an integer in 1..{} (a "
                           "framework may use port..port+{}), got {!r}".format(
                               65536 - CLUSTER_PORTS, CLUSTER_PORTS - 1, port))
    if cluster["interface"] is not None and (
            not isinstance(cluster["interface"], str) or
            not cluster["interface"]):
        raise HarnessError("cluster.interface must be an interface name or "
                           "null, got {!r}".format(cluster["interface"]))
    if not isinstance(cluster["network"], str) or not cluster["network"]:
        raise HarnessError("cluster.network must say which network the job "
                           "is on, got {!r}".format(cluster["network"]))
    checked = dict(cluster)
    timeout = checked.setdefault("timeout_s", CLUSTER_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not timeout > 0:
        raise HarnessError("cluster.timeout_s must be a positive number of "
                           "seconds, got {!r}".format(timeout))
    return checked


def _check_ipv4(address):
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        raise HarnessError("cluster.addresses must be IPv4 addresses, got "
                           "{!r}".format(address))


def convergence_cell(spec, label, total_iterations):
    """The result's `cell` block (harness.spec.CELL_FIELDS): per-worker
    batch, GPUs = workers on GPU (0 on CPU), the first iteration as warm-up."""
    workers = spec["workers"]
    return dict((k, v) for k, v in (
        ("framework", spec["framework"]),
        ("profile", spec["profile"]),
        ("network", spec["network"]),
        ("dataset", label),
        ("batch_size", spec["global_batch_size"] // workers),
        ("global_batch_size", spec["global_batch_size"]),
        ("device", spec["device"]),
        ("gpus", workers if spec["device"] == "gpu" else 0),
        ("threads", spec["threads"]),
        ("iterations", max(1, total_iterations - 1)),
        ("warmup", 1),
        ("runtime", spec["runtime"]),
        ("seed", spec["seed"]),
        ("clock_policy", spec["clock_policy"]),
        ("precision", "default"),
        ("compile", None),
    ))
