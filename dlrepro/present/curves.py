"""Convergence curves: training loss per iteration against epochs and
against training seconds, from convergence results (their
`convergence.curve`), one pair of panels per network; a line per
(framework, workers): colour by framework, dash by worker count."""
import math

from dlrepro.present import style

DASHES = ("-", "--", ":", "-.")
X_LABELS = {"epochs": "epoch",
            "seconds": "training seconds (evaluation excluded)"}


def trained(results):
    """The convergence results that have a loss curve."""
    return [r for r in results
            if (r.get("convergence") or {}).get("curve", {}).get("loss")]


def series(result, axis):
    """(xs, losses) of one result against "epochs" or "seconds"; a
    non-finite loss is NaN, which breaks the line."""
    block = result["convergence"]
    losses = [y if y is not None and math.isfinite(y) else math.nan
              for y in block["curve"]["loss"]]
    if axis == "epochs":
        per_epoch = block["iterations_per_epoch"]
        xs = [(i + 1) / per_epoch for i in range(len(losses))]
    else:
        xs, total = [], 0.0
        for seconds in block["curve"]["seconds"]:
            total += seconds
            xs.append(total)
    return xs, losses


def figure(results, title="Training loss (global batch fixed)"):
    """The curves of `results` (those with a curve) as one Figure."""
    results = trained(results)
    if not results:
        raise ValueError("no convergence result has a loss curve")
    workers = sorted({r["convergence"]["workers"] for r in results})
    networks = sorted({r["cell"]["network"] for r in results})
    fig, axes = style.grid(2 * len(networks), columns=2, width=4.6,
                           height=3.0)
    for row, network in enumerate(networks):
        runs = sorted((r for r in results if r["cell"]["network"] == network),
                      key=lambda r: (style.framework_order(
                          [r["cell"]["framework"]]),
                          r["convergence"]["workers"]))
        for column, axis in enumerate(("epochs", "seconds")):
            ax = axes[2 * row + column]
            for r in runs:
                xs, losses = series(r, axis)
                count = r["convergence"]["workers"]
                ax.plot(xs, losses, color=style.colour(r["cell"]["framework"]),
                        linestyle=DASHES[workers.index(count) % len(DASHES)],
                        linewidth=1.2,
                        gid=f"curve-{r['cell']['framework']}-{network}-"
                            f"w{count}-{axis}",
                        label=f"{r['cell']['framework']} x{count}")
            ax.set_title(f"{network}: loss per iteration")
            ax.set_xlabel(X_LABELS[axis])
            ax.set_ylabel("loss (global batch)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.suptitle(title, x=0.01, ha="left")
    fig.legend(handles, labels, loc="outside upper right",
               ncols=min(len(labels), 6), frameon=False)
    return fig


def summary_rows(summary):
    """The table beside the curves: one row per (comparison, workers) of
    dlrepro.converge.summary.summarise."""
    rows = []
    for comp in summary["comparisons"]:
        for row in comp["rows"]:
            rows.append({
                "framework": comp["framework"], "network": comp["network"],
                "device": comp["device"], "batch": comp["global_batch_size"],
                "epochs": comp["epochs"], "workers": row["workers"],
                "status": row["status"],
                "final_train_loss": row.get("final_train_loss"),
                "final_test_accuracy": row.get("final_test_accuracy"),
                "epochs_to_target": row.get("epochs_to_target"),
                "processing_time_s": row.get("processing_time_s"),
                "speedup": row.get("speedup"),
                "scaling_efficiency": row.get("scaling_efficiency"),
                "note": row.get("reason") or ""})
    return rows
