"""The paper's bench figures as functions of results.

Each figure has a `*_rows` function (results -> the table beside the
figure: a list of dicts, empty when the run has no data for it) and a
`*_figure` function (those rows -> a matplotlib Figure). Times come from
dlrepro.bench.aggregate.CellStats: the mean of a cell's process means with
its 95% confidence interval (between processes with `--repeat` >= 2).
"""
from dlrepro.bench.aggregate import cell_key
from dlrepro.present import style


def _setting(cell):
    if cell["device"] == "gpu":
        return f"b{cell['batch_size']}, {cell['gpus']} GPU"
    threads = cell.get("threads")
    return f"b{cell['global_batch_size']}" + (
        "" if threads is None else f", {threads} thr")


def _row(stats):
    cell = stats.cell
    low, high = stats.ci95_s
    return {"network": cell["network"], "framework": cell["framework"],
            "setting": _setting(cell), "device": cell["device"],
            "batch": cell["global_batch_size"], "threads": cell.get("threads"),
            "gpus": cell.get("gpus") or 0, "processes": stats.processes,
            "ms": stats.mean_s * 1e3, "ci_low_ms": low * 1e3,
            "ci_high_ms": high * 1e3, "ci_basis": stats.ci_basis,
            "samples_per_s": stats.samples_per_s,
            "per_gpu_batch": cell["batch_size"], "key": cell_key(cell)}


def _ordered(values):
    return list(dict.fromkeys(values))


# Time per mini-batch (the paper's bar charts) ---------------------------

def cpu_rows(stats):
    """One row per CPU cell."""
    return [_row(s) for s in stats if s.cell["device"] == "cpu"]


def gpu_rows(stats):
    """One row per single-GPU cell."""
    return [_row(s) for s in stats
            if s.cell["device"] == "gpu" and (s.cell.get("gpus") or 1) == 1]


def time_figure(rows, title):
    """One panel per network: a group of bars per setting (batch, threads
    or GPUs), one bar per framework, with the 95% CI as error bars."""
    networks = _ordered(r["network"] for r in rows)
    frameworks = style.framework_order(r["framework"] for r in rows)
    figure, axes = style.grid(len(networks))
    width = 0.8 / len(frameworks)
    for ax, network in zip(axes, networks):
        mine = [r for r in rows if r["network"] == network]
        settings = _ordered(r["setting"] for r in mine)
        for index, framework in enumerate(frameworks):
            bars = [(settings.index(r["setting"]), r) for r in mine
                    if r["framework"] == framework]
            if not bars:
                continue
            xs = [x - 0.4 + width * (index + 0.5) for x, _ in bars]
            ax.bar(xs, [r["ms"] for _, r in bars], width,
                   color=style.colour(framework), label=framework,
                   yerr=[[r["ms"] - r["ci_low_ms"] for _, r in bars],
                         [r["ci_high_ms"] - r["ms"] for _, r in bars]],
                   error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.set_xticks(range(len(settings)), settings)
        ax.set_title(network)
        ax.set_ylabel("ms per mini-batch")
        ax.set_ylim(bottom=0)
    _legend(figure, axes, title)
    return figure


def _legend(figure, axes, title):
    handles, labels = style.legend_entries(axes)
    figure.suptitle(title, x=0.01, ha="left")
    if labels:
        figure.legend(handles, labels, loc="outside upper right",
                      ncols=len(labels), frameon=False)


# CPU thread scaling -----------------------------------------------------

def scaling_rows(stats):
    """CPU cells of each (network, framework, batch) measured at two or
    more thread counts, with the speedup over the fewest threads."""
    groups = {}
    for row in cpu_rows(stats):
        if row["threads"] is not None:
            key = (row["network"], row["framework"], row["batch"])
            groups.setdefault(key, []).append(row)
    rows = []
    for members in groups.values():
        if len({r["threads"] for r in members}) < 2:
            continue
        members.sort(key=lambda r: r["threads"])
        base = members[0]
        for row in members:
            rows.append(dict(row, base_threads=base["threads"],
                             speedup=base["ms"] / row["ms"]))
    return rows


def scaling_figure(rows):
    """One panel per network: ms per mini-batch against threads, a line
    per framework (and batch), with the 95% CI."""
    networks = _ordered(r["network"] for r in rows)
    figure, axes = style.grid(len(networks))
    for ax, network in zip(axes, networks):
        mine = [r for r in rows if r["network"] == network]
        batches = _ordered(r["batch"] for r in mine)
        for framework in style.framework_order(r["framework"] for r in mine):
            for batch in batches:
                line = [r for r in mine if (r["framework"], r["batch"]) ==
                        (framework, batch)]
                if not line:
                    continue
                ax.errorbar([r["threads"] for r in line],
                            [r["ms"] for r in line],
                            yerr=[[r["ms"] - r["ci_low_ms"] for r in line],
                                  [r["ci_high_ms"] - r["ms"] for r in line]],
                            marker="o", markersize=3, capsize=2,
                            color=style.colour(framework),
                            linestyle="-" if batch == batches[0] else "--",
                            label=framework if len(batches) == 1
                            else f"{framework} b{batch}")
        threads = sorted({r["threads"] for r in mine})
        ax.set_xscale("log", base=2)
        ax.set_xticks(threads, [str(t) for t in threads])
        ax.minorticks_off()
        ax.set_title(network)
        ax.set_xlabel("threads")
        ax.set_ylabel("ms per mini-batch")
        ax.set_ylim(bottom=0)
    _legend(figure, axes, "CPU thread scaling")
    return figure


# Multi-GPU speed-up and scaling efficiency ------------------------------

def multi_gpu_rows(stats):
    """GPU cells of each (network, framework, batch per GPU) measured on
    one GPU and on more: speed-up is throughput (samples/s) on N GPUs over
    that on one; scaling efficiency is speed-up / N."""
    groups = {}
    for s in stats:
        if s.cell["device"] == "gpu" and s.samples_per_s:
            row = _row(s)
            key = (row["network"], row["framework"], row["per_gpu_batch"])
            groups.setdefault(key, []).append(row)
    rows = []
    for members in groups.values():
        one = [r for r in members if r["gpus"] == 1]
        if not one or len({r["gpus"] for r in members}) < 2:
            continue
        for row in sorted(members, key=lambda r: r["gpus"]):
            speedup = row["samples_per_s"] / one[0]["samples_per_s"]
            rows.append(dict(row, speedup=speedup,
                             efficiency=speedup / row["gpus"]))
    return rows


def multi_gpu_figure(rows):
    """Speed-up (with the ideal line) and efficiency against GPUs, a line
    per (framework, network, batch per GPU)."""
    figure, (speed, efficiency) = style.grid(2, columns=2, width=4.6,
                                             height=3.2)
    lines = _ordered((r["framework"], r["network"], r["per_gpu_batch"])
                     for r in rows)
    markers = "osD^v<>"
    networks = _ordered(r["network"] for r in rows)
    for framework, network, batch in lines:
        line = [r for r in rows if (r["framework"], r["network"],
                                    r["per_gpu_batch"]) ==
                (framework, network, batch)]
        gpus = [r["gpus"] for r in line]
        style_ = {"color": style.colour(framework), "markersize": 4,
                  "marker": markers[networks.index(network) % len(markers)],
                  "label": f"{framework} {network} b{batch}/GPU"}
        speed.plot(gpus, [r["speedup"] for r in line], **style_)
        efficiency.plot(gpus, [r["efficiency"] for r in line], **style_)
    most = max(r["gpus"] for r in rows)
    speed.plot([1, most], [1, most], color="#999999", linestyle=":",
               label="ideal")
    for ax in (speed, efficiency):
        ax.set_xticks(sorted({r["gpus"] for r in rows}))
        ax.set_xlabel("GPUs")
    speed.set_ylabel("speed-up (samples/s vs 1 GPU)")
    efficiency.set_ylabel("scaling efficiency (speed-up / GPUs)")
    efficiency.set_ylim(0, 1.1)
    speed.set_title("speed-up")
    efficiency.set_title("scaling efficiency")
    _legend(figure, [speed], "Multi-GPU scaling")
    return figure


# Then (2016) vs now -----------------------------------------------------

def then_now_figure(rows):
    """Seconds per mini-batch, 2016 against now, a pair of bars per
    (network, batch, framework), on a log scale. `rows` are
    dlrepro.bench.compare.rows."""
    labels = [f"{r['network']} b{r['batch']}\n{r['framework']}"
              for r in rows]
    figure, (ax,) = style.grid(1, columns=1,
                               width=max(5.0, 0.9 * len(rows) + 1.5),
                               height=3.4)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["then_s"] * 1e3 for r in rows], 0.4,
           color="#bbbbbb", label="2016 (dlbench raw runs)")
    ax.bar([x + 0.2 for x in xs], [r["now_s"] * 1e3 for r in rows], 0.4,
           color=[style.colour(r["framework"]) for r in rows], label="now")
    ax.set_yscale("log")
    ax.set_xticks(list(xs), labels)
    ax.set_ylabel("ms per mini-batch (log)")
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['speedup']:.1f}x", (x, r["then_s"] * 1e3),
                    textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=8)
    _legend(figure, [ax], "Then (2016) vs now, one GPU")
    return figure
