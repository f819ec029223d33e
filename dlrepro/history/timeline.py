"""Each cell on one machine over time: its runs ordered by date, and the
steps dlrepro.history.steps finds in their means, reported as "stepped
from A to B at run R" with the ratio and its 95% CI."""
from typing import NamedTuple

from dlrepro.history import steps as steps_mod


class History(NamedTuple):
    machine: str
    cell_key: str
    name: str
    rows: list        # ok rows, oldest first
    steps: list       # [steps.Step]


def histories(rows, describe):
    """[History] of every (machine, cell) with ok rows; `describe(cell
    row)` names the cell."""
    grouped = {}
    for row in rows:
        if row["status"] == "ok" and row["mean_s"]:
            grouped.setdefault((row["machine"], row["cell_key"]),
                               []).append(row)
    out = []
    for (machine, key), mine in sorted(grouped.items()):
        mine.sort(key=lambda r: (r["run_started_at"] or "", r["run_id"]))
        found = steps_mod.detect([r["mean_s"] for r in mine],
                                 [r["process_means_s"] or [r["mean_s"]]
                                  for r in mine])
        out.append(History(machine, key, describe(mine[0]), mine, found))
    return out


def step_line(history, step):
    row = history.rows[step.index]
    ci = ("CI -" if step.ci95 is None
          else f"95% CI {step.ci95[0]:.3f}-{step.ci95[1]:.3f}")
    return (f"{history.machine}: {history.name}: stepped from "
            f"{step.before_s * 1e3:.3f} to {step.after_s * 1e3:.3f} ms at run "
            f"{row['run_id']} ({(row['run_started_at'] or '?')[:10]}, "
            f"{row['framework']} {row['framework_version'] or '?'}), ratio "
            f"{step.ratio:.3f} ({ci})" + _mode_change(history, step))


def _mode_change(history, step):
    """The isolation mode changing at the step, named: a default that
    moved a framework into a group's worker is a step of the process, not
    of the framework."""
    before = history.rows[step.index - 1].get("isolation") \
        if step.index else None
    after = history.rows[step.index].get("isolation")
    if before == after or not (before or after):
        return ""
    return (f"; isolation changed there, {before or '?'} -> "
            f"{after or '?'}: the step may be the process's, not the "
            "framework's")


def format_histories(found):
    lines = [f"{len(found)} cell histories, "
             f"{sum(len(h.steps) > 0 for h in found)} with a step"]
    for history in found:
        for step in history.steps:
            lines.append(step_line(history, step))
    return lines
