"""SVG line charts (standard library only)."""
import math
import xml.etree.ElementTree as ET

from dlrepro.converge import svgplot

SVG = "{http://www.w3.org/2000/svg}"


def test_nice_ticks_cover_the_range():
    assert svgplot.nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svgplot.nice_ticks(2.27, 4.76) == [2.0, 2.5, 3.0, 3.5, 4.0, 4.5,
                                              5.0]
    ticks = svgplot.nice_ticks(3.0, 3.0)
    assert ticks[0] <= 3.0 <= ticks[-1] and len(ticks) > 1
    assert svgplot.nice_ticks(float("nan"), 1.0) == [0.0, 1.0]


def test_chart_is_svg_with_one_line_per_series_segment():
    panels = [{"title": "a <b>", "x_label": "epoch", "y_label": "loss",
               "series": [{"label": "pytorch x1", "points": [(1, 2.0), (2, 1.5),
                                                              (3, 1.0)]},
                          {"label": "pytorch x2", "dash": "6,3",
                           "points": [(1, 2.1), (2, math.nan), (3, 1.1),
                                      (4, 0.9)]}]},
              {"title": "empty", "x_label": "x", "y_label": "y", "series": []}]
    text = svgplot.chart(panels, "title & more")
    root = ET.fromstring(text)
    assert root.tag == SVG + "svg"
    lines = root.findall(SVG + "polyline")
    # The NaN splits the second series in two.
    assert [len(l.get("points").split()) for l in lines] == [3, 1, 2]
    assert lines[1].get("stroke-dasharray") == "6,3"
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "a <b>" in texts and "title & more" in texts
    # Points map into the panel's plotting area.
    for line in lines:
        for point in line.get("points").split():
            x, y = map(float, point.split(","))
            assert 56 <= x <= 460 - 12 and 30 + 28 <= y <= 30 + 300 - 40


def test_convergence_panels_per_network_and_axis():
    def result(framework, workers, losses):
        return {"cell": {"framework": framework, "network": "fcn-r"},
                "convergence": {"workers": workers, "iterations_per_epoch": 2,
                                "curve": {"loss": losses,
                                          "seconds": [0.5] * len(losses)}}}
    panels = svgplot.convergence_panels([
        result("pytorch", 1, [2.0, 1.0, 0.5, 0.4]),
        result("pytorch", 2, [2.0, 1.0, 0.5, 0.4]),
        result("mxnet", 1, [2.2, 1.2, 0.7, 0.5])])
    assert [p["x_label"] for p in panels] == [
        "epoch", "training seconds (evaluation excluded)"]
    by_epoch = panels[0]["series"]
    assert [s["label"] for s in by_epoch] == ["mxnet x1", "pytorch x1",
                                              "pytorch x2"]
    assert by_epoch[1]["points"] == [(0.5, 2.0), (1.0, 1.0), (1.5, 0.5),
                                     (2.0, 0.4)]
    assert panels[1]["series"][1]["points"][-1] == (2.0, 0.4)
    assert by_epoch[1]["color"] == by_epoch[2]["color"] != by_epoch[0]["color"]
    assert by_epoch[1]["dash"] == "" and by_epoch[2]["dash"] == "6,3"
