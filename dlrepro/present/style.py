"""matplotlib without pyplot: Figures made directly (no global state, no
display), one colour per framework in every figure, SVG text out.

The SVG is deterministic for the same figure: no date in its metadata and
a fixed hash salt for its clip-path ids."""
import io
import math

import matplotlib
from matplotlib.figure import Figure

matplotlib.use("Agg")
matplotlib.rcParams.update({
    "svg.hashsalt": "dlrepro",
    "svg.fonttype": "path",      # glyphs as paths: no font needed to view
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.color": "#e4e4e4",
    "axes.axisbelow": True,
})

# Frameworks in a fixed order, each with one colour in every figure.
KNOWN = ("pytorch", "tensorflow", "mxnet", "cntk", "caffe", "jax")
PALETTE = ("#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e",
           "#e6ab02", "#a6761d", "#666666")


def framework_order(names):
    """The frameworks in `names`, known ones first in a fixed order."""
    names = set(names)
    return ([n for n in KNOWN if n in names]
            + sorted(n for n in names if n not in KNOWN))


def colour(framework):
    if framework in KNOWN:
        return PALETTE[KNOWN.index(framework)]
    return PALETTE[len(KNOWN) + sum(map(ord, framework))
                   % (len(PALETTE) - len(KNOWN))]


def grid(count, columns=3, width=3.6, height=2.8):
    """(Figure, [axes]) with `count` panels in rows of `columns`."""
    columns = max(1, min(columns, count))
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(width * columns, height * rows + 0.3),
                    layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    for extra in axes[count:]:
        extra.set_visible(False)
    return figure, list(axes[:count])


def legend_entries(axes):
    """The handles and labels of every axes' legend entries, each label
    once, in the order first seen: one legend for a figure's grid."""
    handles, labels = {}, []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in handles:
                handles[label] = handle
                labels.append(label)
    return [handles[label] for label in labels], labels


def svg(figure):
    """The figure as standalone SVG text."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def png(figure, dpi=100):
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
