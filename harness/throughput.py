"""Run one throughput cell: build the network, warm up, time, collect
provenance, write.

A cell always ends in a result file, whatever happens after its spec has
been read (harness.lifecycle): an out-of-memory device, a diverging loss,
a crash in the framework or a SIGTERM from the host's timeout each become a
status with the iterations measured so far.
"""
import sys
import time

from . import (allocator, arithmetic, collector, frameworks, hostcpu,
               lifecycle, networks, phases, provenance, stats, threads)
from .blocks import (loss_block, model_block, new_result, parameter_note,
                     timing_block)
from .errors import Unsupported
from .gpu import cell as gpu_cell
from .spec import validate_cell
from .timing import Series, run_loop


def load_backend(framework, configure):
    """The framework's backend, configured by configure(backend); a
    framework this interpreter cannot import makes the cell unsupported,
    with the interpreter and the import error in the message. Backends
    import their framework on first use, which is in configure."""
    try:
        backend = frameworks.load(framework)
        configure(backend)
    except ImportError as exc:
        raise Unsupported("{} is not importable in {} ({})".format(
            framework, sys.executable, exc))
    return backend


def run_cell(spec, out_path, clock=time.perf_counter, isolation=None,
             group_clocks=None):
    """Run the cell described by `spec` and write its result to `out_path`.
    With `group_clocks` (a worker's harness.gpu.clockgroup.GroupClocks) the
    clock policy is the group's, applied once and restored when the worker
    ends, not around this cell.

    Returns the result dict. Raises HarnessError only for a spec that cannot
    be read as a cell (nothing is written then). Long because its steps are
    closures over the one result that lifecycle.run writes however the
    cell ends, so each phase is stamped and each block filled in place.
    """
    ready = phases.new_block(phases.THROUGHPUT)
    cell = validate_cell(spec.get("cell") if isinstance(spec, dict) else None)
    # GPU cells: NVML inventory, compatibility gate, clock policy, telemetry.
    gpus = gpu_cell.CellGpus(cell, spec, out_path, group=group_clocks)
    result = new_result(cell, spec.get("container"), spec.get("run_id"))
    result["phases"] = ready
    if isolation is not None:  # a cell of a worker's group (harness.worker)
        result["isolation"] = isolation
        if isolation.get("mode") == "group" and isolation.get(
                "position", 1) > 1:
            # Its process started for an earlier cell: no start of its own.
            # (A forked child's start, /proc's, is its fork.)
            ready["process_start"] = None
    series = Series()
    env = result["environment"]
    # Before SIGTERM is armed (lifecycle.run): a signal while this is read
    # would leave a partial result without the host's fields, which the
    # schema rightly refuses.
    env.update(provenance.host_environment())
    loaded = []
    options = {}

    def configure(backend):
        if cell["device"] not in backend.DEVICES:
            raise Unsupported("the {} backend cannot run on {}".format(
                cell["framework"], cell["device"]))
        # Before the framework is imported: what it does not offer ends here.
        options.update(frameworks.prepare_options(
            backend, cell["precision"], cell["compile"]))
        result["compilation"] = arithmetic.compilation_block(
            cell["compile"], frameworks.resolve_compile(backend,
                                                        cell["compile"]),
            [], None)
        backend.configure(cell["threads"], cell["device"], cell["seed"])

    def body():
        # Before any framework loads: thread pools read these at import.
        threads.apply(cell["threads"])
        # Before the framework allocates: no page faults by history.
        env["allocator"] = allocator.hold()
        network = networks.get(cell["network"])
        result["model"] = model_block(network, cell["global_batch_size"])
        result["gpu_clocks"] = gpu_cell.clock_block(cell["clock_policy"],
                                                    cell["device"])
        env["gpus"] = gpus.open()
        if cell["gpus"] > 1:
            raise Unsupported("data-parallel throughput cells ({} GPUs) run "
                              "through the convergence mode".format(cell["gpus"]))
        # Before the framework starts: a stack that cannot run on this GPU
        # or driver ends here, with the reason.
        refusal = gpus.gate(result)
        if refusal:
            raise Unsupported(refusal)
        phases.stamp(result, "device_ready")
        backend = load_backend(cell["framework"], configure)
        loaded.append(backend)
        phases.stamp(result, "framework_imported")
        session = _prepare(result, backend, network, cell, options)
        # After the build, so that no step pays for walking what the import
        # and the cells before made (its cost counts as the model's build).
        env["python_gc"] = collector.settle()
        phases.stamp(result, "model_built")
        # Clocks set before the warm-up; restored in `close` (and at exit).
        warmup = gpus.apply_clocks(result, cell["warmup"])
        step = phases.stamp_after(gpus.timed(session.step, warmup), warmup,
                                  result, "warmup_done")
        run_loop(step, cell["iterations"], warmup, series, clock)
        phases.stamp(result, "timed_done")
        lifecycle.set_outcome(result, series.diverged_at,
                              " (warm-up included)")

    def is_out_of_memory(exc):
        # Not loaded yet: the failure came before the framework could run.
        return bool(loaded) and loaded[0].is_out_of_memory(exc)

    def finish(result):
        _finish(result, series, cell)
        gpus.summarize(result, loaded[0] if loaded else None)

    return lifecycle.run(result, out_path, body, is_out_of_memory,
                         gpus.close, finish)


def _prepare(result, backend, network, cell, options):
    """The cell's session, and what the backend reports recorded: versions,
    threads, parameters, the math in force."""
    env = result["environment"]
    env.update(backend.versions(cell["device"]))
    env["threads"] = {"requested": cell["threads"],
                      "framework": backend.effective_threads(),
                      "environment": threads.snapshot()}
    session = backend.prepare(network, cell["batch_size"], cell["device"],
                              cell["seed"], **options)
    result["precision"] = arithmetic.precision_block(
        cell["precision"], cell["device"], backend.math_mode(cell["device"]),
        session.loss_scaling, session.precision_note)
    result["model"]["framework_parameters"] = session.parameters
    result["model"]["parameter_note"] = parameter_note(network,
                                                        session.parameters)
    # A transformer's attention as its framework runs it (a Session that
    # is not a backends.Session, as a test's fake, has none).
    attention = getattr(session, "attention", None)
    if attention is not None:
        result["model"]["attention"] = attention
    return session


def _finish(result, series, cell):
    if series.times or series.warmup_s:
        result["timing"] = timing_block(series, cell)
        result["loss"] = loss_block(series)
        mean = result["timing"]["mean_s"]
        if result["model"] is not None and mean:
            result["model"]["achieved_flops_per_s"] = (
                result["model"]["executed_flops_per_iteration"] / mean)
        if series.times:
            result["warnings"].extend(stats.warnings_for(series.times,
                                                         cell["warmup"]))
        result["warnings"].extend(hostcpu.warnings_for(
            result["timing"]["host_cpu"]))
    block = result.get("compilation")
    if block is not None:
        median = (result.get("timing") or {}).get("median_s")
        result["compilation"] = arithmetic.compilation_block(
            block["requested"], block["mode"], series.warmup_s, median)
        result["warnings"].extend(arithmetic.warnings_for(
            result["compilation"], median))
