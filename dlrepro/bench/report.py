"""Tables of results. Functions return rows and lines; callers print."""

COLUMNS = ("framework", "network", "device", "batch", "threads", "status",
           "mean s/iter", "95% CI", "samples/s", "CV", "note")


def _fmt_s(value):
    if value is None:
        return "-"
    if value >= 1:
        return f"{value:.3f}"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} us"


def summary_rows(pairs):
    """One row of strings per (run.json entry, result) pair."""
    rows = []
    for entry, result in pairs:
        cell = entry["spec"]
        timing = (result or {}).get("timing") or {}
        ci = timing.get("ci95_s")
        mean = timing.get("mean_s")
        note = entry.get("message") or ""
        if result and result.get("warnings") and entry["status"] == "ok":
            note = result["warnings"][0]
        rows.append((
            cell["framework"], cell["network"], cell["device"],
            str(cell["global_batch_size"]),
            "-" if cell["threads"] is None else str(cell["threads"]),
            entry["status"],
            _fmt_s(mean) if entry["status"] == "ok" else "-",
            (f"±{(ci[1] - ci[0]) / 2 / mean:.1%}" if ci and mean
             and entry["status"] == "ok" else "-"),
            (f"{timing['samples_per_s']:.1f}" if timing.get("samples_per_s")
             and entry["status"] == "ok" else "-"),
            (f"{timing['cv']:.1%}" if timing.get("cv") is not None
             and entry["status"] == "ok" else "-"),
            note[:70] + ("…" if len(note) > 70 else ""),
        ))
    return rows


def format_table(rows, columns=COLUMNS):
    """Plain-text table lines (for logs and non-terminal output)."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
              for i, c in enumerate(columns)]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    out = [line.rstrip(), "  ".join("-" * w for w in widths)]
    for row in rows:
        out.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    return out


def status_counts(pairs):
    counts = {}
    for entry, _ in pairs:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return counts


def side_by_side(pairs):
    """Lines of a table with one row per cell setting (network, device,
    batch, threads) and one column per framework: mean s/iter, or the status
    when not ok. None when the run has a single framework."""
    frameworks = []
    rows = {}
    for entry, result in pairs:
        cell = entry["spec"]
        if cell["framework"] not in frameworks:
            frameworks.append(cell["framework"])
        key = (cell["network"], cell["device"], cell["global_batch_size"],
               "-" if cell["threads"] is None else str(cell["threads"]))
        timing = (result or {}).get("timing") or {}
        rows.setdefault(key, {})[cell["framework"]] = (
            _fmt_s(timing.get("mean_s")) if entry["status"] == "ok"
            else entry["status"])
    if len(frameworks) < 2:
        return None
    columns = ("network", "device", "batch", "threads") + tuple(
        f"{f} s/iter" for f in frameworks)
    table = [(n, d, str(b), t) + tuple(values.get(f, "-") for f in frameworks)
             for (n, d, b, t), values in rows.items()]
    return format_table(table, columns)
