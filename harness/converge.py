"""Convergence mode: train a real-data network for some epochs with N
data-parallel workers and the global batch fixed; record the loss curves,
test accuracy and time per epoch; write one result file.

    python -m harness converge --spec SPEC --out RESULT.json

SPEC is {"convergence": {...}, "container": {...} or null}; the
convergence fields are harness.spec.CONVERGENCE_FIELDS. The result is a
version-1 result file (harness/result.schema.json) whose `cell` follows
harness.spec.CELL_FIELDS, with the first iteration as the warm-up, plus a
`convergence` block: the whole per-iteration curve, the per-epoch curves,
the data's provenance and the run's figures (harness.figures).

Across nodes (docs/multinode.md): SPEC also holds the "cluster" object
(harness.spec.validate_cluster), and this process runs ONE node's part:
its workers_per_node workers of the run's `workers`. Every node writes a
result; node 0's is the run's.

Bad input (a spec that is not valid, data that is missing or does not
verify) raises HarnessError before anything is written; everything after
that ends in a result file with a status (harness.lifecycle), as cells do.
A training cut short (a lost peer, a failed launcher, SIGTERM) keeps the
curves measured until then (the exception's `partial_curves`:
dataparallel.run_epochs, launch) with `convergence.partial` true.
"""
import sys

from . import (frameworks, lifecycle, networks, phases, provenance, stats,
               threads)
from . import figures
from .blocks import loss_block, model_block, new_result, parameter_note, \
    timing_block
from .errors import HarnessError, Unsupported
from .frameworks import dataparallel
from .gpu import cell as gpu_cell
from .spec import convergence_cell, validate_cluster, validate_convergence

CPU_NOTE = ("CPU workers are processes or devices sharing this machine's {} "
            "usable cores: this run tests the data-parallel mechanism and "
            "the loss curves; its speed, speedup and efficiency mean little")


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
    """Run the convergence spec; write and return its result. Long because
    the body and finish are closures over the one result that
    lifecycle.run writes however the run ends, phases and curves kept."""
    if not isinstance(spec, dict):
        raise HarnessError("a spec must be a JSON object")
    ready = phases.new_block(phases.CONVERGENCE)
    conv = validate_convergence(spec.get("convergence"))
    cluster = validate_cluster(spec.get("cluster"), conv)
    module, backend = _modules(conv["framework"])
    usable = provenance.usable_cpus() or 1
    total_threads = conv["threads"] or usable
    per_node = conv["workers"] // conv["nodes"]
    # Worker processes share this node's threads out; replicas in one
    # process use the process's pools.
    worker_threads = dataparallel.threads_per_worker(
        total_threads, per_node) \
        if module.CAPABILITIES.process_per_worker else total_threads
    # Before any framework loads: thread pools read these at import.
    threads.apply(worker_threads)
    data = dataparallel.load_data(conv["data"], conv["seed"])
    phases.mark(ready, "data_loaded")
    per_epoch = dataparallel.check_plan(conv, data.train.count)
    total = per_epoch * conv["epochs"]
    cell = convergence_cell(conv, data.info["label"], total)
    result = new_result(cell, spec.get("container"), spec.get("run_id"))
    result["phases"] = ready
    # GPU runs: the NVML inventory and the stack's compatibility gate, as
    # throughput cells have them (no clock control, no telemetry).
    gpus = gpu_cell.CellGpus(cell, spec, out_path)
    env = result["environment"]
    env.update(provenance.host_environment())
    network = networks.get(conv["network"])
    result["model"] = model_block(network, conv["global_batch_size"])
    result["gpu_clocks"] = gpu_cell.clock_block(conv["clock_policy"],
                                                conv["device"])
    plan = _plan(conv, worker_threads, cluster)
    block = _block(conv, data, per_epoch, total_threads, plan, usable)
    block["cluster"] = _cluster_block(module, conv, cluster)
    result["convergence"] = block
    trained, cut = [], []

    def body():
        env["gpus"] = gpus.open()
        refusal = gpus.gate(result)
        if refusal:
            raise Unsupported(refusal)
        _check_module(module, conv)
        block["mechanism"] = module.MECHANISM.get(conv["device"])
        refusal = frameworks.multi_node_refusal(module, conv["nodes"],
                                                per_node, conv["device"])
        if refusal:
            raise Unsupported(refusal)
        _check_devices(module, conv)
        phases.stamp(result, "device_ready")
        log("{} {} x{} on {} ({}), {} epochs of {} iterations{}".format(
            conv["framework"], conv["network"], conv["workers"],
            conv["device"], data.info["label"], conv["epochs"], per_epoch,
            "" if cluster is None else ", node {} of {} ({} workers "
            "here)".format(cluster["node_rank"], conv["nodes"], per_node)))
        try:
            curves = module.train(plan, data, log)
        except BaseException as exc:
            # A launcher that failed, a lost peer, SIGTERM: the curves
            # measured so far (dataparallel.run_epochs, launch).
            partial = getattr(exc, "partial_curves", None)
            if isinstance(partial, dict):
                cut.append(partial)
            raise
        phases.stamp(result, "trained")
        trained.append(curves)
        _record_framework(result, curves, conv, plan, network)
        lifecycle.set_outcome(result, curves.get("diverged_at"))

    def is_out_of_memory(exc):
        return backend is not None and backend.is_out_of_memory(exc)

    def finish(result):
        if trained:
            _fill(result, trained[0], conv)
        elif cut:
            _fill(result, cut[0], conv)

    return lifecycle.run(result, out_path, body, is_out_of_memory,
                         gpus.close, finish)


def _modules(framework):
    """(parallel module, backend) of `framework`, the modules only (they
    import the framework when they train); (the ImportError, None) when
    they cannot be imported."""
    try:
        return (frameworks.load(framework, "parallel"),
                frameworks.load(framework, "backend"))
    except ImportError as exc:
        return exc, None


def _plan(conv, worker_threads, cluster):
    """What a framework's parallel module trains (its train(plan, ...)):
    on a node of a multi-node run, that node's workers (global ranks
    node_rank * workers_per_node + i of `workers`)."""
    return {
        "nodes": conv["nodes"],
        "node_rank": cluster["node_rank"] if cluster else 0,
        "workers_per_node": conv["workers"] // conv["nodes"],
        "cluster": cluster,
        "network": conv["network"], "device": conv["device"],
        "workers": conv["workers"],
        "global_batch_size": conv["global_batch_size"],
        "epochs": conv["epochs"], "seed": conv["seed"],
        "threads": worker_threads,
        "data": conv["data"],
    }


def _block(conv, data, per_epoch, total_threads, plan, usable):
    """The result's convergence block before training: the run's settings,
    empty curves and the figures of no curve."""
    block = {
        "workers": conv["workers"], "epochs": conv["epochs"],
        "nodes": conv["nodes"],
        "workers_per_node": plan["workers_per_node"],
        "mechanism": None,
        # Workers on one node share its cores (on several, each node's).
        "parallel_note": CPU_NOTE.format(usable)
        if conv["device"] == "cpu" and plan["workers_per_node"] > 1
        else None,
        "data": data.info, "normalisation": _normalisation(data.dataset.kind),
        "iterations_per_epoch": per_epoch,
        "threads_total": total_threads,
        "threads_per_worker": plan["threads"],
        "curve": {"loss": [], "seconds": []},
        "per_epoch": [],
        "diverged_at": None,
        # Set from the curves: whether the training was cut short.
        "partial": None,
        "completed_iterations": 0,
        "in_progress": None,
    }
    block.update(figures.run_figures([], None, conv["target_loss"]))
    return block


def _cluster_block(module, conv, cluster):
    """The cluster object as this node saw it, and the transport its
    framework uses between the nodes; None on one node without one."""
    if cluster is None:
        return None
    block = dict(cluster)
    block["transport"] = None if isinstance(module, ImportError) else \
        frameworks.transport(module, conv["device"], cluster["interface"])
    return block


def _check_module(module, conv):
    """Unsupported unless the framework's parallel module imported."""
    if isinstance(module, ImportError):
        raise Unsupported("{} data parallelism is not available in "
                          "{} ({})".format(conv["framework"],
                                           sys.executable, module))


def _check_devices(module, conv):
    """Unsupported unless the module trains on the device and sees the
    GPUs the run asks for."""
    if conv["device"] not in module.DEVICES:
        raise Unsupported("{} cannot train on {}".format(
            conv["framework"], conv["device"]))
    if conv["device"] == "gpu":
        # Each node holds its own workers' GPUs.
        wanted = conv["workers"] // conv["nodes"]
        available = module.gpu_count()
        if available < wanted:
            raise Unsupported(
                "{} GPUs asked for, {} sees {} on this machine".format(
                    wanted, conv["framework"], available))


def _record_framework(result, curves, conv, plan, network):
    """What the trained framework reported: versions, threads, parameters."""
    env = result["environment"]
    env.update(curves.get("versions") or {})
    env["threads"] = {"requested": conv["threads"],
                      "framework": curves.get("framework_threads"),
                      "per_worker": plan["threads"],
                      "environment": threads.snapshot()}
    parameters = curves.get("framework_parameters")
    result["model"]["framework_parameters"] = parameters
    if parameters is not None:
        result["model"]["parameter_note"] = parameter_note(
            network, parameters)


def _fill(result, curves, conv):
    """Timing, loss and convergence blocks from the curves: the finished
    ones, or those of a training cut short (curves["finished"] False:
    dataparallel.snapshot), whose curve holds the completed epochs, whose
    `in_progress` the epoch cut short and whose timing every iteration
    measured."""
    seconds, losses = curves["iteration_s"], curves["iteration_loss"]
    block = result["convergence"]
    block["curve"] = {"loss": losses, "seconds": seconds}
    block["per_epoch"] = curves["epochs"]
    block["diverged_at"] = curves.get("diverged_at")
    current = curves.get("in_progress")
    block["partial"] = curves.get("finished") is False
    block["in_progress"] = current
    if current:
        seconds = seconds + current["seconds"]
    block["completed_iterations"] = len(seconds)
    timed = seconds[1:]
    result["timing"] = timing_block(_Series(seconds, losses), result["cell"])
    result["loss"] = loss_block(_Series(seconds, losses))
    mean = result["timing"]["mean_s"]
    if mean:
        result["model"]["achieved_flops_per_s"] = (
            result["model"]["executed_flops_per_iteration"] / mean)
    if timed:
        result["warnings"].extend(stats.warnings_for(timed, 1))
    if block["parallel_note"]:
        result["warnings"].append(block["parallel_note"])
    block.update(figures.run_figures(curves["epochs"], mean,
                                     conv["target_loss"]))
    if block["partial"]:
        result["warnings"].append(
            "training was cut short after {} of {} iterations ({} complete "
            "epochs): the curves hold what was measured until then".format(
                block["completed_iterations"],
                block["iterations_per_epoch"] * block["epochs"],
                len(curves["epochs"])))
    # The cell promised the planned iteration count; a diverged or cut-short
    # run stops early and says how far it got in completed_iterations.


class _Series(object):
    """The first iteration as warm-up, the rest timed: the shape that
    harness.blocks' timing and loss blocks read."""

    def __init__(self, seconds, losses):
        self.warmup_s = seconds[:1]
        self.warmup_loss = losses[:1]
        self.times = seconds[1:]
        self.losses = losses[1:]
        self.cpu_s = None
        self.host_start = self.host_end = None
