"""Run one cell: build the network, warm up, time, collect provenance, write.

A cell always ends in a result file, whatever happens after its spec has
been read: an out-of-memory error, a diverging loss, a crash in the
framework or a SIGTERM from the host's timeout each become a status with
the iterations measured so far.
"""
import datetime
import signal
import sys
import time
import traceback

from . import (backends, clocks, gpu, networks, provenance, resultfile,
               stats, threads)
from .errors import HarnessError
from .timing import Series, run_loop

DEVICES = ("cpu", "gpu")
RUNTIMES = ("native", "docker")

# The fields of a cell, in the order results list them. Together they are
# the cell's identity: a resumed run skips a cell only when all are equal.
CELL_FIELDS = ("framework", "profile", "network", "dataset", "batch_size",
               "global_batch_size", "device", "gpus", "threads", "iterations",
               "warmup", "runtime", "seed", "clock_policy")


class Unsupported(HarnessError):
    """This cell cannot run on this stack; its status is `unsupported`."""


class Terminated(BaseException):
    """SIGTERM arrived (the host's timeout, docker stop)."""


# Field checks shared by the throughput cell and the convergence spec
# (harness.converge), so that both refuse bad input in the same words.

def check_integer(spec, key, minimum=1, optional=False):
    value = spec.get(key)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise HarnessError("{} must be an integer >= {}, got {!r}".format(
            key, minimum, value))


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


def check_placement(spec):
    """The spec's device and runtime are known ones."""
    if spec["device"] not in DEVICES:
        raise HarnessError("device must be one of {}, got {!r}".format(
            ", ".join(DEVICES), spec["device"]))
    if spec["runtime"] not in RUNTIMES:
        raise HarnessError("runtime must be one of {}, got {!r}".format(
            ", ".join(RUNTIMES), spec["runtime"]))


def validate_cell(cell):
    """Check a cell spec; returns it with its fields in canonical order."""
    check_fields(cell, CELL_FIELDS, "a cell", "cell")
    if cell["framework"] not in backends.BACKENDS:
        raise HarnessError("unknown framework {!r}; valid frameworks: {}".format(
            cell["framework"], ", ".join(sorted(backends.BACKENDS))))
    networks.get(cell["network"])
    check_placement(cell)
    for key in ("batch_size", "global_batch_size", "iterations"):
        check_integer(cell, key)
    check_integer(cell, "warmup", minimum=0)
    check_integer(cell, "gpus", minimum=0)
    check_integer(cell, "seed", minimum=0)
    check_integer(cell, "threads", optional=True)
    clocks.parse_policy(cell["clock_policy"])
    workers = max(cell["gpus"], 1)
    if cell["global_batch_size"] != cell["batch_size"] * workers:
        raise HarnessError("global_batch_size must be batch_size x workers "
                           "({} x {}), got {}".format(
                               cell["batch_size"], workers,
                               cell["global_batch_size"]))
    if cell["device"] == "cpu" and cell["gpus"] != 0:
        raise HarnessError("a cpu cell uses 0 gpus, got {}".format(cell["gpus"]))
    return dict((k, cell[k]) for k in CELL_FIELDS)


# The result blocks below are shared with harness.converge, so that
# throughput and convergence results describe models, timings and losses in
# exactly the same way.

def utc_now():
    return datetime.datetime.utcnow().replace(microsecond=0).isoformat() + "Z"


def model_block(network, global_batch):
    flops = networks.flops_per_iteration(network, global_batch)
    return {
        "parameters": networks.parameter_count(network),
        "framework_parameters": None,
        "parameter_note": None,
        "flops_per_iteration": flops,
        "flops_convention": networks.FLOPS_CONVENTION,
        "achieved_flops_per_s": None,
        "description": network.description,
    }


def parameter_note(network, counted):
    expected = networks.parameter_count(network)
    extra = networks.lstm_extra_bias(network)
    if counted == expected:
        return None
    if extra and counted == expected + extra:
        return ("framework keeps two LSTM bias vectors per gate "
                "(+{} over the one-bias count)".format(extra))
    return "framework counts {} parameters, the description {}".format(
        counted, expected)


def timing_block(series, cell):
    block = {"per_iteration_s": list(series.times),
             "warmup_s": list(series.warmup_s),
             "completed_iterations": len(series.times)}
    keys = ("mean_s", "median_s", "std_s", "min_s", "max_s", "p05_s", "p95_s",
            "ci95_s", "cv", "outliers", "total_s", "samples_per_s")
    summary = (stats.summarize(series.times, cell["global_batch_size"])
               if series.times else dict((k, None) for k in keys))
    block.update(summary)
    block["cpu_time_s"] = series.cpu_s
    block["cpu_utilization"] = (series.cpu_s / summary["total_s"]
                                if series.cpu_s is not None and summary["total_s"]
                                else None)
    return block


def loss_block(series):
    values = [resultfile.finite_or_none(v) for v in series.losses]
    return {"per_iteration": values,
            "warmup": [resultfile.finite_or_none(v) for v in series.warmup_loss],
            "first": values[0] if values else None,
            "last": values[-1] if values else None}


def new_result(cell, container=None):
    """A result skeleton; `run_cell` fills it in as the cell progresses."""
    return {
        "schema_version": resultfile.SCHEMA_VERSION,
        "status": "error",
        "error": None,
        "cell": cell,
        "model": None,
        "timing": None,
        "loss": None,
        "environment": {
            "framework_version": None, "cuda": None, "cudnn": None,
            "nccl": None, "gpus": [], "container": container,
            "threads": None,
        },
        "gpu_clocks": None,
        "warnings": [],
        "started_at": utc_now(),
        "finished_at": None,
    }


def on_sigterm(signum, frame):
    raise Terminated("terminated by signal {}".format(signum))


def run_cell(spec, out_path, clock=time.perf_counter):
    """Run the cell described by `spec` and write its result to `out_path`.

    Returns the result dict. Raises HarnessError only for a spec that cannot
    be read as a cell (nothing is written then).
    """
    cell = validate_cell(spec.get("cell") if isinstance(spec, dict) else None)
    # GPU cells: NVML inventory, compatibility gate, clock policy, telemetry.
    gpus = gpu.CellGpus(cell, spec, out_path)
    result = new_result(cell, spec.get("container"))
    series = Series()
    env = result["environment"]
    backend = None
    previous_handler = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        # Before any framework loads: thread pools read these at import.
        threads.apply(cell["threads"])
        env.update(provenance.host_environment())
        network = networks.get(cell["network"])
        result["model"] = model_block(network, cell["global_batch_size"])
        result["gpu_clocks"] = gpu.clock_block(cell["clock_policy"],
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
        try:
            backend = backends.load(cell["framework"])
        except ImportError as exc:
            raise Unsupported("{} is not importable in {} ({})".format(
                cell["framework"], sys.executable, exc))
        if cell["device"] not in backend.DEVICES:
            raise Unsupported("the {} backend cannot run on {}".format(
                cell["framework"], cell["device"]))
        backend.configure(cell["threads"], cell["device"], cell["seed"])
        env.update(backend.versions(cell["device"]))
        env["threads"] = {"requested": cell["threads"],
                          "framework": backend.effective_threads(),
                          "environment": threads.snapshot()}
        session = backend.prepare(network, cell["batch_size"], cell["device"],
                                  cell["seed"])
        result["model"]["framework_parameters"] = session.parameters
        result["model"]["parameter_note"] = parameter_note(network,
                                                            session.parameters)
        # Clocks set before the warm-up; restored in `finally` (and at exit).
        warmup = gpus.apply_clocks(result, cell["warmup"])
        run_loop(gpus.timed(session.step, warmup), cell["iterations"], warmup,
                 series, clock)
        if series.diverged_at is not None:
            result["status"] = "diverged"
            result["error"] = {"type": "Diverged", "message":
                               "loss became NaN or infinite at iteration "
                               "{} (warm-up included)".format(
                                   series.diverged_at)}
        else:
            result["status"] = "ok"
    except Unsupported as exc:
        result["status"] = "unsupported"
        result["error"] = {"type": "Unsupported", "message": str(exc)}
    except (Exception, Terminated, KeyboardInterrupt) as exc:
        oom = backend is not None and isinstance(exc, Exception) and \
            backend.is_out_of_memory(exc)
        result["status"] = "oom" if oom else "error"
        result["error"] = {"type": type(exc).__name__,
                           "message": str(exc).strip().splitlines()[0]
                           if str(exc).strip() else type(exc).__name__}
        # The full traceback goes to the cell's log for whoever debugs it.
        traceback.print_exc()
    finally:
        gpus.close(result)
        signal.signal(signal.SIGTERM, previous_handler)
        _finish(result, series, cell)
        gpus.summarize(result, backend)
        resultfile.write_atomic(out_path, result)
    return result


def _finish(result, series, cell):
    if series.times or series.warmup_s:
        result["timing"] = timing_block(series, cell)
        result["loss"] = loss_block(series)
        mean = result["timing"]["mean_s"]
        if result["model"] is not None and mean:
            result["model"]["achieved_flops_per_s"] = (
                result["model"]["flops_per_iteration"] / mean)
        if series.times:
            result["warnings"].extend(stats.warnings_for(series.times,
                                                         cell["warmup"]))
    result["finished_at"] = utc_now()
