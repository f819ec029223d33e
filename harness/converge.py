"""Convergence mode: train a real-data network for some epochs with N
data-parallel workers and the global batch fixed; record the loss curves,
test accuracy and time per epoch; write one result file.

    python -m harness converge --spec SPEC --out RESULT.json

SPEC is {"convergence": {...}, "container": {...} or null}; the
convergence fields are CONVERGENCE_FIELDS (see validate). The result is a
version-1 result file (harness/result.schema.json) whose `cell` follows
harness.cell.CELL_FIELDS, with the first iteration as the warm-up, plus a
`convergence` block: the whole per-iteration curve, the per-epoch curves,
the data's provenance and the run's figures (harness.figures).

Bad input (a spec that is not valid, data that is missing or does not
verify) raises HarnessError before anything is written; everything after
that ends in a result file with a status, as cells do.
"""
import signal
import sys
import time
import traceback

from . import (cell as cells, clocks, datasets, figures, gpu, networks,
               parallel, provenance, resultfile, stats, threads)
from .errors import HarnessError
from .parallel import common

CONVERGENCE_FIELDS = ("framework", "profile", "network", "device", "workers",
                      "global_batch_size", "epochs", "seed", "threads",
                      "runtime", "clock_policy", "data", "target_loss")
DATA_SOURCES = ("files", "synthetic")
CPU_NOTE = ("CPU workers are processes or devices sharing this machine's {} "
            "usable cores: this run tests the data-parallel mechanism and "
            "the loss curves; its speed, speedup and efficiency mean little")


def _validate_data(data, network):
    if not isinstance(data, dict) or data.get("source") not in DATA_SOURCES:
        raise HarnessError("data must be {{\"source\": one of {}, ...}}, got "
                           "{!r}".format(", ".join(DATA_SOURCES), data))
    name = datasets.for_network(network)
    if data.get("name", name) != name:
        raise HarnessError("{} trains on {}, not {}".format(
            network, name, data.get("name")))
    for key in ("train_samples", "test_samples"):
        cells.check_integer(data, key, 1, optional=True)
    if data["source"] == "files":
        if not isinstance(data.get("dir"), str) or not data["dir"]:
            raise HarnessError("data.dir must name the data folder")
    elif data.get("checksums") is not None:
        raise HarnessError("synthetic data has no checksums")
    checked = dict(data)
    checked["name"] = name
    return checked


def validate(spec):
    """Check a convergence spec; returns it with defaults filled in."""
    cells.check_fields(spec, CONVERGENCE_FIELDS, "a convergence spec",
                       "convergence")
    if spec["framework"] not in parallel.PARALLEL:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            spec["framework"], ", ".join(sorted(parallel.PARALLEL))))
    networks.get(spec["network"])
    if datasets.for_network(spec["network"]) is None:
        raise HarnessError("{} trains on synthetic data only; convergence "
                           "networks: {}".format(
                               spec["network"],
                               ", ".join(sorted(datasets.NETWORK_DATASETS))))
    cells.check_placement(spec)
    for key, minimum in (("workers", 1), ("global_batch_size", 1),
                         ("epochs", 1), ("seed", 0)):
        cells.check_integer(spec, key, minimum)
    cells.check_integer(spec, "threads", 1, optional=True)
    if clocks.parse_policy(spec["clock_policy"]).name != clocks.OBSERVE:
        # The workers run in their own processes for the whole training:
        # clocks are observed, never set, here.
        raise HarnessError("convergence runs observe GPU clocks only; "
                           "clock_policy {!r} is for throughput cells".format(
                               spec["clock_policy"]))
    check_split(spec["global_batch_size"], spec["workers"])
    target = spec["target_loss"]
    if target is not None and (isinstance(target, bool) or
                               not isinstance(target, (int, float)) or
                               not target > 0):
        raise HarnessError("target_loss must be a positive number or null, "
                           "got {!r}".format(target))
    checked = dict(spec)
    checked["data"] = _validate_data(spec["data"], spec["network"])
    return checked


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


def _cell(spec, label, total_iterations):
    """The result's `cell` block (harness.cell.CELL_FIELDS): per-worker
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
    ))


def _log(message):
    sys.stderr.write("converge: {}\n".format(message))
    sys.stderr.flush()


def _normalisation(kind):
    if kind == "tokens":
        return ("windows of the word-id stream; targets are the inputs "
                "shifted by one word")
    return ("pixels / 255, then per channel (x - mean) / std with the "
            "training split's mean and std")


def run_convergence(spec, out_path, log=_log):
    """Run the convergence spec; write and return its result."""
    if not isinstance(spec, dict):
        raise HarnessError("a spec must be a JSON object")
    conv = validate(spec.get("convergence"))
    try:
        # The module only; it imports its framework when it trains.
        module = parallel.load(conv["framework"])
    except ImportError as exc:
        module = exc
    usable = provenance.usable_cpus() or 1
    total_threads = conv["threads"] or usable
    # Worker processes share the threads out; replicas in one process use
    # the process's pools.
    worker_threads = common.threads_per_worker(total_threads, conv["workers"]) \
        if getattr(module, "PROCESS_PER_WORKER", False) else total_threads
    # Before any framework loads: thread pools read these at import.
    threads.apply(worker_threads)
    data = common.load_data(conv["data"], conv["seed"])
    per_epoch = common.check_plan(conv, data.train.count)
    total = per_epoch * conv["epochs"]
    cell = _cell(conv, data.info["label"], total)
    result = cells.new_result(cell, spec.get("container"))
    # GPU runs: the NVML inventory and the stack's compatibility gate, as
    # throughput cells have them (no clock control, no telemetry).
    gpus = gpu.CellGpus(cell, spec, out_path)
    env = result["environment"]
    env.update(provenance.host_environment())
    network = networks.get(conv["network"])
    result["model"] = cells.model_block(network, conv["global_batch_size"])
    result["gpu_clocks"] = gpu.clock_block(conv["clock_policy"], conv["device"])
    plan = {
        "network": conv["network"], "device": conv["device"],
        "workers": conv["workers"],
        "global_batch_size": conv["global_batch_size"],
        "epochs": conv["epochs"], "seed": conv["seed"],
        "threads": worker_threads,
        "data": conv["data"],
    }
    block = {
        "workers": conv["workers"], "epochs": conv["epochs"],
        "mechanism": None,
        "parallel_note": CPU_NOTE.format(usable)
        if conv["device"] == "cpu" and conv["workers"] > 1 else None,
        "data": data.info, "normalisation": _normalisation(data.dataset.kind),
        "iterations_per_epoch": per_epoch,
        "threads_total": total_threads,
        "threads_per_worker": plan["threads"],
        "curve": {"loss": [], "seconds": []},
        "per_epoch": [],
        "diverged_at": None,
    }
    block.update(figures.run_figures([], None, conv["target_loss"]))
    result["convergence"] = block
    curves = None
    previous_handler = signal.signal(signal.SIGTERM, cells.on_sigterm)
    try:
        env["gpus"] = gpus.open()
        refusal = gpus.gate(result)
        if refusal:
            raise cells.Unsupported(refusal)
        if isinstance(module, ImportError):
            raise cells.Unsupported("{} data parallelism is not available in "
                                    "{} ({})".format(conv["framework"],
                                                     sys.executable, module))
        block["mechanism"] = module.MECHANISM.get(conv["device"])
        if conv["device"] not in module.DEVICES:
            raise cells.Unsupported("{} cannot train on {}".format(
                conv["framework"], conv["device"]))
        if conv["device"] == "gpu":
            available = module.gpu_count()
            if available < conv["workers"]:
                raise cells.Unsupported(
                    "{} GPUs asked for, {} sees {} on this machine".format(
                        conv["workers"], conv["framework"], available))
        log("{} {} x{} on {} ({}), {} epochs of {} iterations".format(
            conv["framework"], conv["network"], conv["workers"],
            conv["device"], data.info["label"], conv["epochs"], per_epoch))
        curves = module.train(plan, data, log)
        env.update(curves.get("versions") or {})
        env["threads"] = {"requested": conv["threads"],
                          "framework": curves.get("framework_threads"),
                          "per_worker": plan["threads"],
                          "environment": threads.snapshot()}
        parameters = curves.get("framework_parameters")
        result["model"]["framework_parameters"] = parameters
        if parameters is not None:
            result["model"]["parameter_note"] = cells.parameter_note(
                network, parameters)
        if curves.get("diverged_at") is not None:
            result["status"] = "diverged"
            result["error"] = {"type": "Diverged", "message":
                               "loss became NaN or infinite at iteration "
                               "{}".format(curves["diverged_at"])}
        else:
            result["status"] = "ok"
    except cells.Unsupported as exc:
        result["status"] = "unsupported"
        result["error"] = {"type": "Unsupported", "message": str(exc)}
    except (Exception, cells.Terminated, KeyboardInterrupt) as exc:
        result["status"] = "error"
        message = str(exc).strip()
        result["error"] = {"type": type(exc).__name__,
                           "message": message.splitlines()[0] if message
                           else type(exc).__name__}
        traceback.print_exc()
    finally:
        gpus.close(result)
        signal.signal(signal.SIGTERM, previous_handler)
        if curves is not None:
            _fill(result, curves, conv)
        result["finished_at"] = cells.utc_now()
        resultfile.write_atomic(out_path, common.json_safe(result))
    return result


def _fill(result, curves, conv):
    """Timing, loss and convergence blocks from the curves."""
    seconds, losses = curves["iteration_s"], curves["iteration_loss"]
    block = result["convergence"]
    block["curve"] = {"loss": losses, "seconds": seconds}
    block["per_epoch"] = curves["epochs"]
    block["diverged_at"] = curves.get("diverged_at")
    timed = seconds[1:]
    result["timing"] = cells.timing_block(_Series(seconds, losses), result["cell"])
    result["loss"] = cells.loss_block(_Series(seconds, losses))
    mean = result["timing"]["mean_s"]
    if mean:
        result["model"]["achieved_flops_per_s"] = (
            result["model"]["flops_per_iteration"] / mean)
    if timed:
        result["warnings"].extend(stats.warnings_for(timed, 1))
    if block["parallel_note"]:
        result["warnings"].append(block["parallel_note"])
    block.update(figures.run_figures(curves["epochs"], mean,
                                     conv["target_loss"]))
    # The cell promised the planned iteration count; a diverged run stops
    # early and says how far it got in timing.completed_iterations.


class _Series(object):
    """The first iteration as warm-up, the rest timed: the shape that
    harness.cell's timing and loss blocks read."""

    def __init__(self, seconds, losses):
        self.warmup_s = seconds[:1]
        self.warmup_loss = losses[:1]
        self.times = seconds[1:]
        self.losses = losses[1:]
        self.cpu_s = None
