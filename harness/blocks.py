"""The blocks of a result file (harness/result.schema.json) that throughput
cells and convergence runs share, so that both describe models, timings and
losses in exactly the same way; and the one clock stamp results carry.
Pure: the host builds results for cells that never ran with it too.
"""
import datetime
import time

from . import hostcpu, networks, resultfile, stats


def utc_now():
    """Now in UTC to the second, as results and clock-state files stamp it:
    2016-08-15T12:00:00Z."""
    return utc_stamp(time.time())


def utc_stamp(epoch_s):
    """The moment `epoch_s` (seconds since the epoch) stamped as utc_now
    stamps it."""
    return datetime.datetime.fromtimestamp(
        epoch_s, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_result(cell, container=None, run_id=None):
    """A result skeleton for `cell` (status `error` until a runner says
    otherwise), of run `run_id` where the spec names one."""
    result = {
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
        "precision": None,
        "compilation": None,
        "warnings": [],
        "started_at": utc_now(),
        "finished_at": None,
    }
    if run_id is not None:
        # A copy of it in another run's folder is then told apart.
        result["run_id"] = run_id
    return result


def model_block(network, global_batch):
    flops = networks.flops_per_iteration(network, global_batch)
    return {
        "parameters": networks.parameter_count(network),
        "framework_parameters": None,
        "parameter_note": None,
        "flops_per_iteration": flops,
        "flops_convention": networks.FLOPS_CONVENTION,
        "executed_flops_per_iteration": networks.executed_flops_per_iteration(
            network, global_batch),
        "executed_flops_convention": networks.EXECUTED_FLOPS_CONVENTION,
        "achieved_flops_per_s": None,
        "description": network.description,
    }


def parameter_note(network, counted):
    """Why a framework's parameter count differs from the description's,
    or None when it does not."""
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
    """`series` (harness.timing.Series or the like): warmup_s, times, cpu_s,
    host_start, host_end."""
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
    block["host_cpu"] = hostcpu.window_block(series.host_start,
                                             series.host_end, series.cpu_s)
    block["process_counts"] = hostcpu.counts_block(series.host_start,
                                                   series.host_end)
    return block


def loss_block(series):
    values = [resultfile.finite_or_none(v) for v in series.losses]
    return {"per_iteration": values,
            "warmup": [resultfile.finite_or_none(v) for v in series.warmup_loss],
            "first": values[0] if values else None,
            "last": values[-1] if values else None}
