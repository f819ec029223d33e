"""The HTML report: one self-contained file (figures embedded as SVG data
URIs, styles and a small check script inline; nothing fetched when it is
opened) with the paper's figure types, each beside its table, and what
produced the results.

A figure that a run has no data for is left out with a one-line note. The
inline script, run on load, checks that every figure image decoded and has
a size, logs a console error for one that did not, and writes
`data-figures="<drawn>/<total>"` on <body> for tests and tools to read.
"""
import base64
import html
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, NamedTuple

from dlrepro import outfile
from dlrepro.bench import aggregate, compare, report
from dlrepro.converge import summary as converge_summary
from dlrepro.present import charts, curves, provenance, style
from dlrepro.run import groups, runrecord, store
from dlrepro.run.kinds import KINDS


class Runs(NamedTuple):
    """The runs of one page: [(run_dir, record, job_results)] and what the
    figures read from them."""
    runs: list
    bench_pairs: list
    stats: list           # aggregate.CellStats of the bench cells
    converge_results: list
    modes: dict           # aggregate.cell_key -> isolation of its processes


def gather(runs):
    """Runs from [(run_dir, record, job_results)]; bench runs' job results
    are pooled (a cell measured in two runs has the processes of both)."""
    bench = [j for _d, record, job_results in runs
             if runrecord.kind_of(record) is KINDS["bench"]
             for j in job_results]
    converge = [r for _d, record, job_results in runs
                if runrecord.kind_of(record) is KINDS["converge"]
                for _e, r in job_results if r is not None]
    return Runs(runs, bench, aggregate.run_stats(bench), converge,
                _modes(runs))


def _modes(runs):
    """{cell key: `cell`, `group` or `cell+group`}: the isolation of the
    ok processes each bench cell's figures pool, across the runs."""
    found = {}
    for _d, record, job_results in runs:
        if runrecord.kind_of(record) is not KINDS["bench"]:
            continue
        for entry, result in job_results:
            if result is not None and entry["status"] == "ok":
                found.setdefault(aggregate.cell_key(result["cell"]),
                                 set()).add(groups.process_mode(
                                     record, entry, result))
    return {key: groups.modes_label(modes) for key, modes in found.items()}


def _mixed_note(runs):
    """A warning naming the cells whose figures pool processes of both
    modes, or ""."""
    mixed = sorted({f"{s.cell['framework']} {s.cell['network']}"
                    for s in runs.stats
                    if runs.modes.get(aggregate.cell_key(s.cell)) ==
                    "cell+group"})
    if not mixed:
        return ""
    return ('<p class="warn">Isolation: ' + html.escape(
        f"{', '.join(mixed)} pool processes that ran one cell each with "
        "processes of a group's worker (column isolation cell+group); "
        "their interval spans both modes.") + "</p>")


def _ms(value):
    return "-" if value is None else f"{value:.3g}" if value < 100 \
        else f"{value:.0f}"


def _num(spec):
    return lambda v: "-" if v is None else format(v, spec)


def _ci(row):
    return f"{_ms(row['ci_low_ms'])} - {_ms(row['ci_high_ms'])}"


def _mode(value):
    return value or "-"


ISOLATION = ("isolation", "isolation", _mode)
TIME_COLUMNS = [("network", "network", str), ("framework", "framework", str),
                ("setting", "setting", str), ("processes", "procs", str),
                ("ms", "ms/batch", _ms), (None, "95% CI (ms)", _ci),
                ("samples_per_s", "samples/s", _num(".1f")), ISOLATION]


class Section(NamedTuple):
    id: str
    title: str
    caption: str
    columns: list         # [(key or None, header, format(value or row))]
    empty: str            # the note when there are no rows
    rows: Callable        # Runs -> [dict]
    figure: Callable      # (Runs, rows) -> matplotlib Figure


SECTIONS = [
    Section("cpu-time", "Time per mini-batch on the CPU",
            "Mean time per mini-batch of each cell (mean of its processes' "
            "means), bars grouped by setting (batch, threads), one colour "
            "per framework; error bars are the 95% confidence interval.",
            TIME_COLUMNS, "no CPU cells in this run",
            lambda runs: charts.cpu_rows(runs.stats),
            lambda runs, rows: charts.time_figure(
                rows, "Time per mini-batch, CPU")),
    Section("cpu-scaling", "CPU thread scaling",
            "Time per mini-batch against the number of threads; speed-up "
            "is relative to the fewest threads measured.",
            TIME_COLUMNS[:3] + [("threads", "threads", str)]
            + TIME_COLUMNS[4:6] + [("speedup", "speed-up", _num(".2f")),
                                   ISOLATION],
            "no CPU cell in this run was measured at two or more thread "
            "counts", lambda runs: charts.scaling_rows(runs.stats),
            lambda runs, rows: charts.scaling_figure(rows)),
    Section("gpu-time", "GPU comparison: time per mini-batch on one GPU",
            "Mean time per mini-batch of each single-GPU cell, one colour "
            "per framework; error bars are the 95% confidence interval.",
            TIME_COLUMNS, "no GPU cells in this run",
            lambda runs: charts.gpu_rows(runs.stats),
            lambda runs, rows: charts.time_figure(
                rows, "Time per mini-batch, one GPU")),
    Section("multi-gpu", "Multi-GPU speed-up and scaling efficiency",
            "Throughput on N GPUs over throughput on one, with the batch per "
            "GPU fixed; efficiency is speed-up / N.",
            [("network", "network", str), ("framework", "framework", str),
             ("per_gpu_batch", "batch/GPU", str), ("gpus", "GPUs", str),
             ("ms", "ms/batch", _ms),
             ("samples_per_s", "samples/s", _num(".1f")),
             ("speedup", "speed-up", _num(".2f")),
             ("efficiency", "efficiency", _num(".2f")), ISOLATION],
            "no GPU cell in this run was measured on one GPU and on more",
            lambda runs: charts.multi_gpu_rows(runs.stats),
            lambda runs, rows: charts.multi_gpu_figure(rows)),
    Section("convergence", "Convergence: loss against epochs and seconds",
            "Training loss per iteration of data-parallel runs with the "
            "global batch fixed: solid 1 worker, dashed 2 (and so on).",
            [("framework", "framework", str), ("network", "network", str),
             ("workers", "workers", str), ("status", "status", str),
             ("final_train_loss", "final loss", _num(".4f")),
             ("final_test_accuracy", "test acc.", _num(".3f")),
             ("processing_time_s", "s/iter", _num(".4f")),
             ("speedup", "speed-up", _num(".2f")),
             ("scaling_efficiency", "efficiency", _num(".2f"))],
            "no convergence run with loss curves among these runs",
            lambda runs: curves.summary_rows(converge_summary.summarise(
                runs.converge_results)) if curves.trained(
                    runs.converge_results) else [],
            lambda runs, rows: curves.figure(runs.converge_results)),
    Section("then-now", "Then (2016) vs now",
            "Single-GPU seconds per mini-batch beside the raw runs the "
            "paper's authors posted in December 2016 (K80, GTX 1080; their "
            "timings include the data pipeline, ours time device-resident "
            "batches).",
            [("network", "network", str), ("batch", "batch", str),
             ("framework", "framework", str),
             ("then_gpu", "2016 GPU", str),
             ("then_s", "2016 s/batch", _num(".4f")),
             ("now_gpu", "now GPU", str),
             ("now_s", "now s/batch", _num(".4f")),
             ("speedup", "then/now", _num(".1f")), ("note", "note", str)],
            "no single-GPU result in this run matches the 2016 reference "
            "(single-GPU fcn-r, alexnet-r, resnet-56 or lstm at the paper's "
            "batch sizes)",
            # A transformer's rows say that 2016 had none (no figure).
            lambda runs: compare.rows(runs.bench_pairs,
                                      compare.load_reference())
            + compare.no_reference_rows(runs.bench_pairs)
            if any(s.cell["device"] == "gpu" for s in runs.stats) else [],
            lambda runs, rows: charts.then_now_figure(compare.compared(rows))),
]


def _table(columns, rows):
    head = "".join(f"<th>{html.escape(h)}</th>" for _k, h, _f in columns)
    body = []
    for row in rows:
        cells = []
        for key, _header, fmt in columns:
            value = fmt(row) if key is None else fmt(row.get(key))
            cells.append(f"<td>{html.escape(str(value))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<table><thead><tr>{head}</tr></thead><tbody>"
            + "".join(body) + "</tbody></table>")


def _img(figure, name, alt):
    data = base64.b64encode(style.svg(figure).encode()).decode()
    return (f'<figure class="plot" data-figure="{html.escape(name)}">'
            f'<img src="data:image/svg+xml;base64,{data}" '
            f'alt="{html.escape(alt)}"></figure>')


def section(spec, runs):
    """The HTML of one figure section and whether it has a figure."""
    rows = [dict(r, isolation=runs.modes.get(r["key"])) if "key" in r
            else r for r in spec.rows(runs)]
    head = (f'<section id="{spec.id}"><h2>{html.escape(spec.title)}</h2>')
    if not rows:
        return head + (f'<p class="empty">{html.escape(spec.empty)}</p>'
                       "</section>"), False
    figure = spec.figure(runs, rows)
    return (head + f'<p class="caption">{html.escape(spec.caption)}</p>'
            f'<div class="pair">{_img(figure, spec.id, spec.title)}'
            f'<div class="table">{_table(spec.columns, rows)}</div></div>'
            "</section>"), True


def _pairs_list(items):
    return "<dl>" + "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}"
                            "</dd>" for k, v in items) + "</dl>"


def _rows_table(rows, empty):
    if not rows:
        return f'<p class="empty">{html.escape(empty)}</p>'
    return _table([(k, k, str) for k in rows[0]], rows)


def all_cells(runs):
    """The text report's table (every cell, failed ones too)."""
    if not runs.bench_pairs:
        return ""
    rows = [dict(zip(report.COLUMNS, r))
            for r in report.summary_rows(runs.bench_pairs)]
    return ('<section id="cells"><h2>Every cell</h2><p class="caption">'
            "The table of <code>invoke report</code>: CV is the spread of "
            "iterations within a process, between CV that of the process "
            "means.</p>" + _table([(c, c, str) for c in report.COLUMNS], rows)
            + "</section>")


def run_provenance(run_dir, record, job_results):
    """What produced one run."""
    items = [("run", str(record.get("run_id"))),
             ("folder", str(run_dir)), ("kind", record["kind"]),
             ("command", str(record.get("command") or "-")),
             ("status", str(record.get("status"))),
             ("runtime", str(record.get("runtime") or "-")),
             ("started", str(record.get("started_at") or "-")),
             ("finished", str(record.get("finished_at") or "-"))]
    items += provenance.hardware(record, job_results)
    items += provenance.clock_policy(job_results)
    warnings = provenance.warnings(job_results)
    return (f'<div class="run"><h3>{html.escape(str(record.get("run_id")))}'
            "</h3>" + _pairs_list(items)
            + "<h4>Frameworks and images</h4>"
            + _rows_table(provenance.software(job_results), "no results")
            + "<h4>GPU telemetry</h4>"
            + _rows_table(provenance.telemetry(job_results),
                          "no GPU telemetry: no GPU cell in this run")
            + f"<h4>Warnings ({len(warnings)})</h4>"
            + '<div class="scroll">' + _rows_table(warnings, "none")
            + "</div></div>")


CSS = """
body{font-family:sans-serif;margin:24px;color:#222;max-width:1800px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 4px;
border-bottom:1px solid #ddd}h3{font-size:15px}h4{font-size:13px;
margin:14px 0 4px}
.caption,.empty,.meta{color:#555;font-size:13px;margin:4px 0 8px}
.empty{font-style:italic}
.pair{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
figure.plot{margin:0;flex:1 1 560px;min-width:0}
figure.plot img{max-width:100%;height:auto;display:block}
.table{overflow:auto;max-height:80vh;flex:0 1 auto}
.scroll{overflow:auto;max-height:320px;display:inline-block}
table{border-collapse:collapse;font-size:12px}
th,td{border:1px solid #ddd;padding:2px 6px;text-align:left;
white-space:nowrap}th{background:#f3f3f3;position:sticky;top:0}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;
font-size:13px;margin:0}dt{color:#555}dd{margin:0;word-break:break-all}
.warn{background:#fff4e0;border:1px solid #f0c060;padding:6px 10px;
font-size:13px}
"""

CHECK = """
window.addEventListener("load", function () {
  var images = document.querySelectorAll("figure.plot img"), drawn = 0;
  images.forEach(function (img) {
    var box = img.getBoundingClientRect();
    if (img.complete && img.naturalWidth > 0 && box.width > 0 &&
        box.height > 0) { drawn += 1; }
    else { console.error("figure not drawn: " + img.alt); }
  });
  document.body.setAttribute("data-figures", drawn + "/" + images.length);
  document.body.setAttribute("data-height",
                             document.documentElement.scrollHeight);
});
"""


def build(runs_list, now=None):
    """The page's HTML text for [(run_dir, record, job_results)]."""
    runs = gather(runs_list)
    now = now or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections, drawn = [], 0
    for spec in SECTIONS:
        text, has_figure = section(spec, runs)
        sections.append(text)
        drawn += has_figure
    warnings = sum(len(provenance.warnings(p)) for _d, _r, p in runs_list)
    ids = ", ".join(str(r.get("run_id")) for _d, r, _p in runs_list)
    pooled = sum(runrecord.kind_of(r) is KINDS["bench"]
                 for _d, r, _p in runs_list) > 1
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>dlrepro report: {html.escape(ids)}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>dlrepro: Shi et al. 2016 benchmarks, rerun</h1>",
        f'<p class="meta">runs {html.escape(ids)}; {drawn} figure'
        f"{'s' * (drawn != 1)}; written "
        f"{now} by <code>invoke report --html</code></p>",
        (f'<p class="warn">{warnings} warning(s): see "What produced these '
         'results" below.</p>' if warnings else ""),
        ('<p class="meta">Several bench runs: a cell measured in more than '
         "one run pools the processes of all of them.</p>" if pooled else ""),
        _mixed_note(runs),
        *sections, all_cells(runs),
        '<section id="provenance"><h2>What produced these results</h2>',
        *(run_provenance(d, r, p) for d, r, p in runs_list), "</section>",
        f"<script>{CHECK}</script></body></html>\n"])


def write(path, runs):
    """Write the page of `runs` (dlrepro.run.store.runs) to `path`;
    returns a line saying what was written."""
    text = build([tuple(run) for run in runs])
    data = text.encode("utf-8")  # the size on disk, not in characters
    path = Path(path)
    with outfile.replacing(path, label=f"the report to {path}") as tmp:
        tmp.write_bytes(data)
    count = text.count("<figure class=")
    return (f"report: {path} ({count} figure{'s' * (count != 1)}, "
            f"{len(data) // 1024} KiB)")
