"""Convergence figures derived from loss curves. Pure functions, no I/O;
docs/convergence.md defines each figure in words.

A run's curves: `per_epoch`, a list of {"epoch", "train_loss", "train_s",
"test_loss", "test_accuracy", ...} (train_loss: the mean over the epoch's
iterations of the global batch's loss; train_s: wall seconds of the epoch's
training iterations, evaluation excluded), and the mean seconds per
iteration (`processing_time_s`, warm-up excluded).
"""
import math


def _finite(value):
    return value is not None and not (math.isnan(value) or math.isinf(value))


def epochs_to_target(per_epoch, target):
    """The first epoch (1-based) whose mean training loss is <= target, or
    None when no epoch reaches it."""
    if target is None:
        return None
    for entry in per_epoch:
        if _finite(entry["train_loss"]) and entry["train_loss"] <= target:
            return entry["epoch"]
    return None


def seconds_to_target(per_epoch, target):
    """Training seconds (evaluation excluded) from the start of the run to
    the end of the epoch that first reaches the target, or None."""
    epoch = epochs_to_target(per_epoch, target)
    if epoch is None:
        return None
    return math.fsum(e["train_s"] for e in per_epoch if e["epoch"] <= epoch)


def run_figures(per_epoch, processing_time_s, target=None):
    """The figures of one run (one worker count)."""
    last = per_epoch[-1] if per_epoch else {}
    return {
        "target_loss": target,
        "epochs_to_target": epochs_to_target(per_epoch, target),
        "seconds_to_target": seconds_to_target(per_epoch, target),
        "final_train_loss": last.get("train_loss"),
        "final_test_loss": last.get("test_loss"),
        "final_test_accuracy": last.get("test_accuracy"),
        "training_s": math.fsum(e["train_s"] for e in per_epoch),
        "processing_time_s": processing_time_s,
    }


def default_target(runs):
    """The loss that every compared run reached: the highest final training
    loss among them (runs without a finite final loss are left out)."""
    finals = [r["per_epoch"][-1]["train_loss"] for r in runs
              if r["per_epoch"] and _finite(r["per_epoch"][-1]["train_loss"])]
    return max(finals) if finals else None


def _ratio(value, base):
    if value is None or base is None or base == 0:
        return None
    return float(value) / base


def compare(runs, target=None):
    """Figures across worker counts of one (framework, network, global
    batch, dataset, seed). `runs`: [{"workers", "per_epoch",
    "processing_time_s"}]. Ratios and speedups are relative to the 1-worker
    run; they are None when there is none.

    Returns {"target_loss", "target_source", "rows": [...]} with one row per
    run, sorted by workers.
    """
    source = "given"
    if target is None:
        target = default_target(runs)
        source = "highest final training loss among the runs"
    ordered = sorted(runs, key=lambda r: r["workers"])
    base = next((r for r in ordered if r["workers"] == 1), None)
    base_epochs = epochs_to_target(base["per_epoch"], target) if base else None
    base_seconds = seconds_to_target(base["per_epoch"], target) if base else None
    base_time = base["processing_time_s"] if base else None
    rows = []
    for run in ordered:
        figures = run_figures(run["per_epoch"], run["processing_time_s"],
                              target)
        speedup = _ratio(base_time, run["processing_time_s"])
        figures.update({
            "workers": run["workers"],
            "epochs_ratio": _ratio(figures["epochs_to_target"], base_epochs),
            "seconds_ratio": _ratio(figures["seconds_to_target"],
                                    base_seconds),
            "speedup": speedup,
            "scaling_efficiency": None if speedup is None else
            speedup / run["workers"],
        })
        rows.append(figures)
    return {"target_loss": target, "target_source": source, "rows": rows}
