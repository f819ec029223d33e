"""`invoke history`: the database's cells across machines and over time,
as terminal lines and, with --html, one page."""
from dlrepro.errors import UserError
from dlrepro.history import db, machines, page, timeline
from dlrepro.run.groups import MODES


def check_isolation(labels):
    """--isolation's values: a mode, or several joined by + as a cell's
    processes' modes are labelled (cell+group); UserError otherwise."""
    for label in labels:
        if not set(label.split("+")) <= set(MODES):
            raise UserError(f"unknown --isolation {label!r}; valid: "
                            f"{', '.join(MODES)}, or several joined by + "
                            f"(cell+group)")


def export_lines(target, runs, machine):
    """`invoke export --db`: the runs' finished cells added to the results
    database at `target` (migrated first where older, which a line says);
    what it did, as lines."""
    engine, migrated = db.connect(target)
    counts = db.export(engine, [(r.record, r.jobs) for r in runs], machine,
                       target=target)
    said = f"database: {counts['new']} cells new, {counts['updated']} " \
           f"updated, {counts['unchanged']} unchanged"
    if counts["other_runs"]:
        said += f"; {counts['other_runs']} convergence run(s) left out"
    if counts["not_begun"]:
        said += (f"; {counts['not_begun']} run(s) with no result yet left "
                 "for a later export")
    return [migrated] * bool(migrated) + [said]


def run(target, filters, reference=True, html=None):
    """The report's lines (and the page, with `html`); the database is
    only read (db.open_to_read)."""
    check_isolation(filters.get("isolation") or [])
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
