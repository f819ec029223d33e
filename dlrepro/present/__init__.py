"""Presentation: figures and the HTML report, drawn from finished runs.

The top layer of the host: it reads run folders (dlrepro.run.store),
takes the numbers from dlrepro.bench and dlrepro.converge, and measures
nothing itself. Every figure is a pure function of results: a `*_rows`
function turns results into the table that stands beside the figure, and a
`*_figure` function draws those same rows with matplotlib (the Agg/SVG
backends, no display, no network).

    style.py       matplotlib set-up: a Figure, colours, SVG text
    charts.py      the bench figures: time per mini-batch, CPU thread
                   scaling, GPU comparison, multi-GPU scaling, then vs now
    curves.py      convergence loss curves against epochs and seconds
    provenance.py  what produced the results: hardware, versions, images,
                   clock policy, telemetry, warnings
    page.py        the self-contained HTML page
"""
