"""Figures as functions of results (dlrepro.present): the rows beside each
figure and what the matplotlib figure draws, on hand-made results."""
import math
import xml.etree.ElementTree as ET

from dlrepro.bench import aggregate
from dlrepro.present import charts, curves, style


def cell(framework="pytorch", network="fcn5", device="cpu", threads=1,
         gpus=0, batch=16):
    return {"framework": framework, "network": network, "device": device,
            "threads": threads if device == "cpu" else None,
            "gpus": gpus, "batch_size": batch,
            "global_batch_size": batch * max(gpus, 1), "profile": device,
            "runtime": "native", "dataset": "synthetic", "iterations": 3,
            "warmup": 1, "seed": 0, "clock_policy": "observe"}


def stats(c, *process_times):
    """CellStats of a cell measured by one process per list of times."""
    return aggregate.cell_stats(c, [
        {"cell": c, "status": "ok", "timing": {"per_iteration_s": list(t)}}
        for t in process_times])


def test_svg_is_deterministic_standalone_svg():
    def draw():
        figure, (ax,) = style.grid(1)
        ax.plot([1, 2, 3], [3, 1, 2], label="a & b")
        return style.svg(figure)
    first = draw()
    assert first == draw()
    root = ET.fromstring(first.encode())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


def test_cpu_rows_and_thread_scaling():
    all_stats = [
        stats(cell(threads=1), [0.2, 0.2, 0.2], [0.22, 0.2, 0.21]),
        stats(cell(threads=2), [0.1, 0.1, 0.1], [0.12, 0.1, 0.11]),
        stats(cell("mxnet", threads=1), [0.3, 0.3, 0.3]),
        stats(cell(device="gpu", gpus=1), [0.01, 0.01, 0.01])]
    rows = charts.cpu_rows(all_stats)
    assert [(r["framework"], r["setting"]) for r in rows] == [
        ("pytorch", "b16, 1 thr"), ("pytorch", "b16, 2 thr"),
        ("mxnet", "b16, 1 thr")]
    assert math.isclose(rows[0]["ms"], 205.0)
    assert rows[0]["ci_low_ms"] < 205.0 < rows[0]["ci_high_ms"]
    # Only pytorch was measured at two thread counts.
    scaling = charts.scaling_rows(all_stats)
    assert [(r["framework"], r["threads"]) for r in scaling] == [
        ("pytorch", 1), ("pytorch", 2)]
    assert math.isclose(scaling[1]["speedup"], 205.0 / 105.0)
    figure = charts.time_figure(rows, "t")
    (ax,) = [a for a in figure.axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["b16, 1 thr",
                                                            "b16, 2 thr"]
    assert len(ax.patches) == 3          # 2 pytorch bars + 1 mxnet bar
    scaling_axes = charts.scaling_figure(scaling).axes
    assert scaling_axes[0].get_xlabel() == "threads"


def test_multi_gpu_speedup_is_throughput_over_one_gpu():
    all_stats = [stats(cell(device="gpu", gpus=1), [0.1, 0.1]),
                 stats(cell(device="gpu", gpus=2), [0.125, 0.125]),
                 stats(cell(device="gpu", gpus=4), [0.2, 0.2]),
                 stats(cell("mxnet", device="gpu", gpus=1), [0.1, 0.1])]
    assert len(charts.gpu_rows(all_stats)) == 2
    rows = charts.multi_gpu_rows(all_stats)
    assert [(r["gpus"], round(r["speedup"], 3), round(r["efficiency"], 3))
            for r in rows] == [(1, 1.0, 1.0), (2, 1.6, 0.8), (4, 2.0, 0.5)]
    speed, efficiency = charts.multi_gpu_figure(rows).axes[:2]
    assert list(speed.lines[0].get_ydata()) == [1.0, 1.6, 2.0]
    assert speed.lines[-1].get_label() == "ideal"


def test_no_rows_without_the_data():
    cpu_only = [stats(cell(threads=1), [0.2, 0.2])]
    assert charts.gpu_rows(cpu_only) == []
    assert charts.multi_gpu_rows(cpu_only) == []
    assert charts.scaling_rows(cpu_only) == []


def test_then_now_figure_draws_both_bars():
    rows = [{"network": "alexnet-r", "batch": 1024, "framework": "pytorch",
             "now_s": 0.05, "now_gpu": "H200", "then_tool": "torch",
             "then_gpu": "K80", "then_s": 0.5, "speedup": 10.0, "note": ""}]
    (ax,) = charts.then_now_figure(rows).axes
    assert sorted(p.get_height() for p in ax.patches) == [50.0, 500.0]
    assert ax.get_yscale() == "log"


def converge_result(framework, workers, losses, network="fcn-r"):
    return {"cell": {"framework": framework, "network": network},
            "convergence": {"workers": workers, "iterations_per_epoch": 2,
                            "curve": {"loss": losses,
                                      "seconds": [0.5] * len(losses)}}}


def test_curve_series_against_epochs_and_seconds():
    result = converge_result("pytorch", 1, [2.0, 1.0, None, 0.4])
    xs, ys = curves.series(result, "epochs")
    assert xs == [0.5, 1.0, 1.5, 2.0]
    assert ys[:2] == [2.0, 1.0] and math.isnan(ys[2]) and ys[3] == 0.4
    assert curves.series(result, "seconds")[0] == [0.5, 1.0, 1.5, 2.0]


def test_curves_figure_colour_by_framework_dash_by_workers():
    results = [converge_result("pytorch", 1, [2.0, 1.0, 0.5, 0.4]),
               converge_result("pytorch", 2, [2.0, 1.0, 0.5, 0.4]),
               converge_result("mxnet", 1, [2.2, 1.2, 0.7, 0.5]),
               {"cell": {"framework": "mxnet", "network": "fcn-r"},
                "convergence": {"workers": 2, "curve": {"loss": []}}}]
    figure = curves.figure(results)
    by_epoch, by_seconds = figure.axes[:2]
    assert by_epoch.get_xlabel() == "epoch"
    assert by_seconds.get_xlabel().startswith("training seconds")
    lines = {line.get_label(): line for line in by_epoch.lines}
    assert sorted(lines) == ["mxnet x1", "pytorch x1", "pytorch x2"]
    assert lines["pytorch x1"].get_color() == lines["pytorch x2"].get_color()
    assert lines["pytorch x1"].get_color() != lines["mxnet x1"].get_color()
    assert lines["pytorch x1"].get_linestyle() == "-"
    assert lines["pytorch x2"].get_linestyle() == "--"
