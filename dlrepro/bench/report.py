"""Tables of results. Functions return rows and lines; callers print.

One row per cell, whatever number of processes measured it (`--repeat`):
its mean and confidence interval come from dlrepro.bench.aggregate. Times
are in milliseconds throughout a column, never a mix of units.
"""
from harness import hostcpu
from harness.stats import HIGH_VARIATION

from dlrepro.bench import aggregate

COLUMNS = ("framework", "network", "device", "batch", "threads", "status",
           "procs", "mean ms/iter", "95% CI", "samples/s", "CV",
           "between CV", "precision", "compile", "note")


def _ms(value):
    return "-" if value is None else f"{value * 1e3:.2f}"


def status_of(members):
    """The cell's status: its processes' when they agree, else the worst
    one with how many processes had it."""
    statuses = [entry["status"] for entry, _ in members]
    if len(set(statuses)) == 1:
        return statuses[0]
    worst = next(s for s in statuses if s != "ok")
    return f"{worst} {statuses.count(worst)}/{len(statuses)}"


def _retried_alone(members):
    """What the note says of a cell measured again alone after its group's
    worker ran out of memory with it, or None."""
    for _, result in members:
        retry = ((result or {}).get("isolation") or {}).get(
            "retried_alone_after")
        if retry:
            return (f"measured alone after {retry.get('status')} in its "
                    f"group's worker (cell {retry.get('position')})")
    return None


def _note(members, stats):
    """A retry alone and a failed process's message, or either, else the
    first warning: a busy host's (it explains the rest), then the cell's
    own (its interval, its pooled CV) before its processes', whose CV
    warnings are each one process's and would contradict the CV column."""
    # Its group's worker ran out of memory with it: a reader comparing it
    # with its neighbours should know it ran alone, whatever it ended as.
    retried = _retried_alone(members)
    for entry, result in members:
        if entry["status"] != "ok" and entry.get("message"):
            return (f"{retried}: {entry['message']}" if retried
                    else entry["message"])
    if retried:
        return retried
    notes = aggregate.warnings(stats) if stats else []
    for _, result in members:
        notes += [w for w in (result or {}).get("warnings") or ()
                  if not w.startswith(HIGH_VARIATION)]
    notes.sort(key=lambda text: not hostcpu.is_host_warning(text))
    return notes[0] if notes else ""


def precision_of(spec, members):
    """The precision asked, and what `default` resolved to when a result
    says (default (tf32 conv, fp32 matmul))."""
    asked = spec.get("precision", "default")
    for _entry, result in members:
        block = (result or {}).get("precision") or {}
        if asked == "default" and block.get("resolved"):
            return f"default ({block['resolved']})"
    return asked


def compile_of(spec, members):
    """The compile mode run (the framework's default resolved), or "-"."""
    for _entry, result in members:
        block = (result or {}).get("compilation") or {}
        if block.get("mode"):
            return block["mode"]
    return spec.get("compile") or "-"


def _variant(spec):
    """A cell's precision and compile mode when not the defaults, as a
    suffix that keeps such cells apart in the side-by-side table."""
    parts = []
    if spec.get("precision", "default") != "default":
        parts.append(spec["precision"])
    if spec.get("compile") is not None:
        parts.append(f"compile {spec['compile']}")
    return f" [{', '.join(parts)}]" if parts else ""


def summary_rows(job_results):
    """One row of strings per cell."""
    rows = []
    for spec, members in aggregate.cells(job_results):
        ok = aggregate.ok_results(members)
        stats = aggregate.cell_stats(ok[0]["cell"], ok) if ok else None
        note = _note(members, stats)
        rows.append((
            spec["framework"], spec["network"], spec["device"],
            str(spec["global_batch_size"]),
            "-" if spec["threads"] is None else str(spec["threads"]),
            status_of(members), str(len(members)),
            _ms(stats.mean_s) if stats else "-",
            (f"±{(stats.ci95_s[1] - stats.mean_s) / stats.mean_s:.1%}"
             if stats and stats.mean_s else "-"),
            f"{stats.samples_per_s:.1f}" if stats and stats.samples_per_s
            else "-",
            (f"{stats.within_sd_s / stats.mean_s:.1%}"
             if stats and stats.mean_s else "-"),
            (f"{stats.between_sd_s / stats.mean_s:.1%}"
             if stats and stats.between_sd_s is not None and stats.mean_s
             else "-"),
            precision_of(spec, members), compile_of(spec, members),
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


def status_counts(job_results):
    counts = {}
    for entry, _ in job_results:
        counts[entry["status"]] = counts.get(entry["status"], 0) + 1
    return counts


def side_by_side(job_results):
    """Lines of a table with one row per cell setting (network, device,
    batch, threads) and one column per framework: mean ms/iter, or the
    status when not ok. None when the run has a single framework."""
    frameworks = []
    rows = {}
    for spec, members in aggregate.cells(job_results):
        if spec["framework"] not in frameworks:
            frameworks.append(spec["framework"])
        key = (spec["network"] + _variant(spec), spec["device"],
               spec["global_batch_size"],
               "-" if spec["threads"] is None else str(spec["threads"]))
        ok = aggregate.ok_results(members)
        rows.setdefault(key, {})[spec["framework"]] = (
            _ms(aggregate.cell_stats(ok[0]["cell"], ok).mean_s)
            if len(ok) == len(members) else status_of(members))
    if len(frameworks) < 2:
        return None
    columns = ("network", "device", "batch", "threads") + tuple(
        f"{f} ms/iter" for f in frameworks)
    table = [(n, d, str(b), t) + tuple(values.get(f, "-") for f in frameworks)
             for (n, d, b, t), values in rows.items()]
    return format_table(table, columns)


def side_by_side_lines(job_results):
    """side_by_side under its heading, or [] for a single framework."""
    table = side_by_side(job_results)
    if not table:
        return []
    return ["\nside by side (mean ms per iteration):"] + table


def image_lines(job_results):
    """One line per framework/profile with the image its results ran in:
    the pullable reference where `invoke push` recorded one (anyone can
    run those very bytes), else the local image and its ID."""
    seen = {}
    for _entry, result in job_results:
        container = ((result or {}).get("environment") or {}).get("container")
        if not container:
            continue
        labels = container.get("labels") or {}
        name = (f"{labels.get('org.dlrepro.framework') or result['cell']['framework']}"
                f"/{labels.get('org.dlrepro.profile') or '?'}")
        where = container.get("pullable") or (
            f"{container.get('image')} ({(container.get('image_id') or '?')[:19]}, "
            f"not pushed)")
        seen.setdefault(f"  {name} ({container.get('runtime')}): {where}", None)
    return ["\nimages:"] + list(seen) if seen else []
