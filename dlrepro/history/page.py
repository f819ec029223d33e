"""The history page: the same cells across machines and each cell over
time, in the figure style of `invoke report --html` (dlrepro.present:
matplotlib SVG embedded as data URIs, the same styles and the same on-load
check that every figure drew, `data-figures` on <body>)."""
import base64
import html
from datetime import datetime, timezone
from pathlib import Path

from dlrepro import outfile
from dlrepro.history import machines as machines_mod
from dlrepro.present import page as report_page
from dlrepro.present import style

MAX_STEP_FIGURES = 24


def _table(headers, rows):
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>"
                                    for v in row) + "</tr>" for row in rows)
    return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>"
            "</table>")


def _img(figure, name, alt):
    data = base64.b64encode(style.svg(figure).encode()).decode()
    return (f'<figure class="plot" data-figure="{html.escape(name)}">'
            f'<img src="data:image/svg+xml;base64,{data}" '
            f'alt="{html.escape(alt)}"></figure>')


def _machine_colours(machines):
    return {m: style.PALETTE[i % len(style.PALETTE)]
            for i, m in enumerate(machines)}


def machines_figure(machines, found):
    """One panel per network: a group of bars per cell, one bar per
    machine (ms per mini-batch, log scale: machines differ by orders)."""
    networks = list(dict.fromkeys(r["cell"]["network"] for r in found))
    colours = _machine_colours(machines)
    figure, axes = style.grid(len(networks))
    width = 0.8 / len(machines)
    for ax, network in zip(axes, networks):
        mine = [r for r in found if r["cell"]["network"] == network]
        for index, machine in enumerate(machines):
            bars = [(x, r) for x, r in enumerate(mine)
                    if machine in r["times"]]
            if bars:
                ax.bar([x - 0.4 + width * (index + 0.5) for x, _ in bars],
                       [r["times"][machine] * 1e3 for _, r in bars], width,
                       color=colours[machine], label=machine)
        ax.set_xticks(range(len(mine)), [
            r["name"].split(" ", 2)[2][:18] for r in mine], fontsize=7)
        ax.set_yscale("log")
        ax.set_title(network)
        ax.set_ylabel("ms per mini-batch")
    handles, labels = style.legend_entries(axes)
    figure.legend(handles, labels, loc="outside upper center",
                  ncols=min(4, len(labels)), frameon=False)
    return figure


def step_figure(history):
    """A cell's history: each run's mean with its 95% CI, the fitted
    levels, and the step runs marked."""
    figure, (ax,) = style.grid(1, width=7.0, height=2.8)
    xs = list(range(len(history.rows)))
    means = [r["mean_s"] * 1e3 for r in history.rows]
    low = [m - (r["ci95_low_s"] or r["mean_s"]) * 1e3
           for m, r in zip(means, history.rows)]
    high = [(r["ci95_high_s"] or r["mean_s"]) * 1e3 - m
            for m, r in zip(means, history.rows)]
    colour = style.colour(history.rows[0]["framework"])
    ax.errorbar(xs, means, yerr=[low, high], fmt="o", ms=3, color=colour,
                elinewidth=0.8, capsize=2, label="run mean, 95% CI")
    starts = [0] + [s.index for s in history.steps] + [len(xs)]
    for a, b in zip(starts, starts[1:]):
        level = sum(means[a:b]) / (b - a)
        ax.hlines(level, a - 0.4, b - 0.6, color="#333", lw=1.2)
    for step in history.steps:
        ax.axvline(step.index - 0.5, color="#c00", ls="--", lw=0.8)
    ax.set_xticks(xs, [(r["run_started_at"] or "?")[5:16].replace("T", " ")
                       for r in history.rows], rotation=60, fontsize=6)
    ax.set_ylabel("ms per mini-batch")
    ax.set_title(f"{history.machine}: {history.name}")
    return figure


def _section(sid, title, caption, body):
    return (f'<section id="{sid}"><h2>{html.escape(title)}</h2>'
            f'<p class="caption">{html.escape(caption)}</p>{body}</section>')


def across_section(machines, found, diffs):
    if not found:
        return _section("machines", "Across machines", "", (
            '<p class="empty">no cell was measured on two or more machines '
            "(the same cell: every identity field equal)</p>")), 0
    rows = [[r["name"]] + [f"{r['times'][m] * 1e3:.3f}" if m in r["times"]
                           else "-" for m in machines] for r in found]
    figure = _img(machines_figure(machines, found), "machines",
                  "ms per mini-batch by machine")
    diff_rows = [[fact] + [values.get(m, "-") for m in machines
                           if not m.startswith("2016 ")]
                 for fact, values in diffs]
    differ = (_table(["fact"] + [m for m in machines
                                 if not m.startswith("2016 ")], diff_rows)
              if diffs else '<p class="empty">the machines differ in no '
              "recorded fact</p>")
    note = (f'<p class="meta">{html.escape(machines_mod.REFERENCE_NOTE)}</p>'
            if any(m.startswith("2016 ") for m in machines) else "")
    return _section(
        "machines", "Across machines",
        "ms per mini-batch of the same cell (every identity field equal), "
        "the latest run of each machine.",
        f'<div class="pair">{figure}<div class="table">'
        f"{_table(['cell (ms per mini-batch)'] + machines, rows)}</div></div>"
        f"{note}<h3>What differs between the machines</h3>{differ}"), 1


def over_time_section(histories, step_line):
    stepped = [h for h in histories if h.steps]
    summary = _table(
        ["machine", "cell", "runs", "first", "last", "steps"],
        [[h.machine, h.name, len(h.rows),
          (h.rows[0]["run_started_at"] or "-")[:16],
          (h.rows[-1]["run_started_at"] or "-")[:16], len(h.steps)]
         for h in histories])
    lines = "".join(f"<li>{html.escape(step_line(h, s))}</li>"
                    for h in stepped for s in h.steps)
    figures = "".join(_img(step_figure(h), f"steps-{i}", h.name)
                      for i, h in enumerate(stepped[:MAX_STEP_FIGURES]))
    body = (f"<ul>{lines}</ul>" if lines else
            '<p class="empty">no step found in any cell\'s history</p>')
    return _section(
        "over-time", "Over time",
        "Each cell on one machine, runs ordered by date; steps found by a "
        "penalised piecewise-constant fit of the run means (asv's method), "
        "kept when the ratio's 95% CI excludes 1.",
        body + f'<div class="pair">{figures}</div>'
        f'<div class="scroll">{summary}</div>'), min(len(stepped),
                                                     MAX_STEP_FIGURES)


def build(target, across, over_time, filters, now=None):
    now = now or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    (a_html, a_count), (t_html, t_count) = across, over_time
    drawn = a_count + t_count
    shown = ", ".join(f"{k} {', '.join(v)}" for k, v in filters.items() if v)
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>dlrepro history</title>",
        f"<style>{report_page.CSS}</style></head><body>",
        "<h1>dlrepro: many runs, many machines</h1>",
        f'<p class="meta">database {html.escape(target)}'
        f"{'; ' + html.escape(shown) if shown else ''}; {drawn} figure"
        f"{'s' * (drawn != 1)}; written {now} by "
        "<code>invoke history --html</code></p>",
        a_html, t_html,
        f"<script>{report_page.CHECK}</script></body></html>\n"])


def write(path, text):
    path = Path(path)
    # Whole or not at all, like `report --html` (a full disk left a torn
    # page in place of the last one).
    with outfile.replacing(path, label=f"the page to {path}") as tmp:
        tmp.write_text(text, encoding="utf-8")
    count = text.count("<figure class=")
    return (f"history page: {path} ({count} figure{'s' * (count != 1)}, "
            f"{len(text.encode()) // 1024} KiB)")
