"""The figures of a convergence run across its worker counts, as data and
as text lines (harness.figures does the arithmetic)."""
from harness import figures


def _group_key(result):
    cell = result["cell"]
    return (cell["framework"], cell["network"], cell["device"],
            cell["global_batch_size"], result["convergence"]["epochs"],
            cell["seed"], cell["dataset"])


def summarise(results):
    """{"comparisons": [...]}: harness.figures.compare over the worker
    counts of each (framework, network, device, global batch, epochs,
    seed, dataset); runs that produced no curves appear with their status
    only."""
    groups = {}
    for result in results:
        if result.get("convergence") is None:
            continue
        groups.setdefault(_group_key(result), []).append(result)
    comparisons = []
    for key in sorted(groups, key=lambda k: tuple(str(v) for v in k)):
        members = sorted(groups[key],
                         key=lambda r: r["convergence"]["workers"])
        trained = [r for r in members if r["convergence"]["per_epoch"]]
        targets = {r["convergence"]["target_loss"] for r in trained}
        target = targets.pop() if len(targets) == 1 else None
        compared = figures.compare([
            {"workers": r["convergence"]["workers"],
             "per_epoch": r["convergence"]["per_epoch"],
             "processing_time_s": r["convergence"]["processing_time_s"]}
            for r in trained], target) if trained else \
            {"target_loss": None, "target_source": None, "rows": []}
        status = dict((r["convergence"]["workers"], r) for r in members)
        for row in compared["rows"]:
            row["status"] = status[row["workers"]]["status"]
        for r in members:
            if not r["convergence"]["per_epoch"]:
                compared["rows"].append({
                    "workers": r["convergence"]["workers"],
                    "status": r["status"],
                    "reason": (r.get("error") or {}).get("message")})
        compared["rows"].sort(key=lambda row: row["workers"])
        framework, network, device, batch, epochs, seed, dataset = key
        compared.update({
            "framework": framework, "network": network, "device": device,
            "global_batch_size": batch, "epochs": epochs, "seed": seed,
            "dataset": dataset,
            "mechanism": members[0]["convergence"]["mechanism"],
            "note": next((r["convergence"]["parallel_note"] for r in members
                          if r["convergence"]["parallel_note"]), None),
        })
        comparisons.append(compared)
    return {"kind": "convergence-summary", "comparisons": comparisons}


def _fmt(value, spec):
    if value is None:
        return "-"
    return format(value, spec)


def table_lines(summary):
    """The convergence figures as text lines (one block per comparison)."""
    lines = []
    header = (f"{'workers':>7} {'status':<11} {'ep->tgt':>7} {'s->tgt':>8} "
              f"{'ep ratio':>8} {'s ratio':>7} {'s/iter':>8} {'speedup':>7} "
              f"{'effic.':>6} {'final loss':>10} {'test acc':>8}")
    for comp in summary["comparisons"]:
        dataset = comp["dataset"]
        if " sha256:" in dataset:
            name, digest = dataset.split(" sha256:", 1)
            dataset = f"{name} sha256:{digest[:12]}..."
        lines.append(f"{comp['framework']} {comp['network']} on "
                     f"{comp['device']}, global batch "
                     f"{comp['global_batch_size']}, {comp['epochs']} epochs, "
                     f"seed {comp['seed']}, data {dataset}")
        lines.append(f"  target loss {_fmt(comp['target_loss'], '.4f')} "
                     f"({comp['target_source'] or 'no curves'}); "
                     f"{comp['mechanism']}")
        lines.append("  " + header)
        for row in comp["rows"]:
            if "reason" in row:
                lines.append(f"  {row['workers']:>7} {row['status']:<11} "
                             f"{row['reason'] or ''}")
                continue
            lines.append(
                f"  {row['workers']:>7} {row['status']:<11} "
                f"{_fmt(row['epochs_to_target'], 'd'):>7} "
                f"{_fmt(row['seconds_to_target'], '.1f'):>8} "
                f"{_fmt(row['epochs_ratio'], '.2f'):>8} "
                f"{_fmt(row['seconds_ratio'], '.2f'):>7} "
                f"{_fmt(row['processing_time_s'], '.4f'):>8} "
                f"{_fmt(row['speedup'], '.2f'):>7} "
                f"{_fmt(row['scaling_efficiency'], '.2f'):>6} "
                f"{_fmt(row['final_train_loss'], '.4f'):>10} "
                f"{_fmt(row['final_test_accuracy'], '.3f'):>8}")
        if comp["note"]:
            lines.append(f"  note: {comp['note']}")
    return lines
