"""Line charts as SVG text, with the standard library only (no matplotlib
on the host). A chart is a grid of panels; a panel has axes, a title and
series of (x, y) points; points with a non-finite y break the line."""
import math
from xml.sax.saxutils import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
DASHES = ("", "6,3", "2,2", "8,3,2,3")
FONT = "font-family='sans-serif'"


def nice_ticks(low, high, count=5):
    """About `count` round tick values covering [low, high]."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10)
                if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def _label(value):
    return f"{value:g}"


def _finite(y):
    return y is not None and math.isfinite(y)


def _panel(panel, left, top, width, height):
    """SVG elements of one panel placed at (left, top). Why this is long:
    axes, ticks, grid, series and legend of one panel are one drawing, in
    one coordinate system."""
    pad_l, pad_r, pad_t, pad_b = 56, 12, 28, 40
    inner_w, inner_h = width - pad_l - pad_r, height - pad_t - pad_b
    xs = [x for s in panel["series"] for x, y in s["points"] if _finite(y)]
    ys = [y for s in panel["series"] for x, y in s["points"] if _finite(y)]
    x_ticks = nice_ticks(min(xs, default=0.0), max(xs, default=1.0))
    y_ticks = nice_ticks(min(ys, default=0.0), max(ys, default=1.0))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]

    def px(x):
        return left + pad_l + (x - x0) / (x1 - x0) * inner_w

    def py(y):
        return top + pad_t + inner_h - (y - y0) / (y1 - y0) * inner_h

    out = [f"<text x='{left + pad_l + inner_w / 2:.1f}' y='{top + 16}' "
           f"{FONT} font-size='13' text-anchor='middle'>"
           f"{escape(panel['title'])}</text>",
           f"<rect x='{left + pad_l}' y='{top + pad_t}' width='{inner_w}' "
           f"height='{inner_h}' fill='none' stroke='#888'/>"]
    for x in x_ticks:
        out.append(f"<line x1='{px(x):.1f}' y1='{top + pad_t + inner_h}' "
                   f"x2='{px(x):.1f}' y2='{top + pad_t}' stroke='#eee'/>")
        out.append(f"<text x='{px(x):.1f}' y='{top + pad_t + inner_h + 14}' "
                   f"{FONT} font-size='10' text-anchor='middle'>"
                   f"{_label(x)}</text>")
    for y in y_ticks:
        out.append(f"<line x1='{left + pad_l}' y1='{py(y):.1f}' "
                   f"x2='{left + pad_l + inner_w}' y2='{py(y):.1f}' "
                   f"stroke='#eee'/>")
        out.append(f"<text x='{left + pad_l - 4}' y='{py(y) + 3:.1f}' "
                   f"{FONT} font-size='10' text-anchor='end'>"
                   f"{_label(y)}</text>")
    out.append(f"<text x='{left + pad_l + inner_w / 2:.1f}' "
               f"y='{top + height - 6}' {FONT} font-size='11' "
               f"text-anchor='middle'>{escape(panel['x_label'])}</text>")
    out.append(f"<text x='{left + 14}' y='{top + pad_t + inner_h / 2:.1f}' "
               f"{FONT} font-size='11' text-anchor='middle' transform='rotate("
               f"-90 {left + 14} {top + pad_t + inner_h / 2:.1f})'>"
               f"{escape(panel['y_label'])}</text>")
    for index, series in enumerate(panel["series"]):
        color = series.get("color") or COLORS[index % len(COLORS)]
        dash = series.get("dash", "")
        segments, current = [], []
        for x, y in series["points"]:
            if _finite(y):
                current.append(f"{px(x):.1f},{py(y):.1f}")
            elif current:
                segments.append(current)
                current = []
        if current:
            segments.append(current)
        for segment in segments:
            out.append(f"<polyline fill='none' stroke='{color}' "
                       f"stroke-width='1.4'"
                       + (f" stroke-dasharray='{dash}'" if dash else "")
                       + f" points='{' '.join(segment)}'/>")
        ly = top + pad_t + 12 + 13 * index
        lx = left + pad_l + inner_w - 150
        out.append(f"<line x1='{lx}' y1='{ly - 4}' x2='{lx + 22}' "
                   f"y2='{ly - 4}' stroke='{color}' stroke-width='1.6'"
                   + (f" stroke-dasharray='{dash}'" if dash else "") + "/>")
        out.append(f"<text x='{lx + 26}' y='{ly}' {FONT} font-size='10'>"
                   f"{escape(series['label'])}</text>")
    return out


def chart(panels, title, columns=2, panel_width=460, panel_height=300):
    """An SVG document with `panels` in a grid of `columns`."""
    rows = max(1, -(-len(panels) // columns))
    width = panel_width * min(columns, max(1, len(panels)))
    height = 30 + panel_height * rows
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' "
             f"height='{height}' viewBox='0 0 {width} {height}'>",
             f"<rect width='{width}' height='{height}' fill='white'/>",
             f"<text x='{width / 2}' y='20' {FONT} font-size='15' "
             f"text-anchor='middle'>{escape(title)}</text>"]
    for index, panel in enumerate(panels):
        row, column = divmod(index, columns)
        parts.extend(_panel(panel, column * panel_width,
                            30 + row * panel_height, panel_width,
                            panel_height))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def convergence_panels(results):
    """Panels of training loss per iteration, against epochs and against
    training seconds, one pair per network; a series per (framework,
    workers): colour by framework, dash by worker count."""
    frameworks = sorted({r["cell"]["framework"] for r in results})
    worker_counts = sorted({r["convergence"]["workers"] for r in results})
    by_network = {}
    for r in results:
        if r["convergence"]["curve"]["loss"]:
            by_network.setdefault(r["cell"]["network"], []).append(r)
    panels = []
    for network in sorted(by_network):
        runs = sorted(by_network[network],
                      key=lambda r: (r["cell"]["framework"],
                                     r["convergence"]["workers"]))
        for axis in ("epochs", "seconds"):
            series = []
            for r in runs:
                block = r["convergence"]
                losses = block["curve"]["loss"]
                if axis == "epochs":
                    per_epoch = block["iterations_per_epoch"]
                    xs = [(i + 1) / per_epoch for i in range(len(losses))]
                else:
                    xs, total = [], 0.0
                    for s in block["curve"]["seconds"]:
                        total += s
                        xs.append(total)
                series.append({
                    "label": f"{r['cell']['framework']} x{block['workers']}",
                    "points": list(zip(xs, losses)),
                    "color": COLORS[frameworks.index(r["cell"]["framework"])
                                    % len(COLORS)],
                    "dash": DASHES[worker_counts.index(block["workers"])
                                   % len(DASHES)]})
            panels.append({
                "title": f"{network}: training loss per iteration",
                "x_label": "epoch" if axis == "epochs"
                else "training seconds (evaluation excluded)",
                "y_label": "loss (global batch)", "series": series})
    return panels
