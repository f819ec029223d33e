"""`invoke history`: the database's cells across machines and over time,
as terminal lines and, with --html, one page."""
from dlrepro.errors import UserError
from dlrepro.history import db, machines, page, timeline


def run(target, filters, reference=True, html=None):
    """The report's lines (and the page, with `html`); the database is
    only read (db.open_to_read)."""
    rows = machines.select(db.read_cells(db.open_to_read(target), target),
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
