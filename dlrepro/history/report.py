"""`invoke history`: the database's cells across machines and over time,
as terminal lines and, with --html, one page."""
from pathlib import Path

from dlrepro.errors import UserError
from dlrepro.history import db, machines, page, timeline


def _existing(target):
    """A SQLite path must exist: reading would otherwise create it empty."""
    url = db.url_of(target)
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if not path.exists():
            raise UserError(f"no results database at {path}: make one with "
                            "`invoke export --db`")


def run(target, filters, reference=True, html=None):
    """The report's lines (and the page, with `html`)."""
    _existing(target)
    rows = machines.select(db.read_cells(db.connect(target), target),
                           **filters)
    if not rows:
        raise UserError(f"no cells in {db.safe_url(target)} match the "
                        "filters")
    names, found = machines.table(
        rows, machines.reference_machines() if reference else None)
    diffs = machines.differences(rows, names)
    histories = timeline.histories(rows, machines.describe)
    lines = (machines.format_table(names, found, diffs) + [""]
             + timeline.format_histories(histories))
    if html:
        text = page.build(db.safe_url(target), page.across_section(names, found, diffs),
                          page.over_time_section(histories,
                                                 timeline.step_line),
                          filters)
        lines.append(page.write(html, text))
    return lines
