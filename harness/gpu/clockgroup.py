"""A clock policy held by a group of cells (`python -m harness worker`):
applied once, before the group's first GPU cell's warm-up, held across its
cells, restored when the worker ends (end of input, SIGTERM, SIGINT, an
exception, interpreter exit).

Locking and unlocking around every cell would make each cell's first
iterations run while the GPU settles to a clock just set, and would cost
every cell the set and reset calls; a group's cells share their clock
policy (a process-wide field), so the worker applies it once.

The record on disk (harness/gpu/clockstate.py) covers the group:
- `<first>.worker.clock-state.json` (clockstate.group_state_path of the
  first GPU cell's state file) holds the original state and every change
  from before the first set call until the worker has restored them.
- From a cell's start (before its model is built) until just before the
  worker says it is done, the cell's own state file (the spec's
  `clock_state`) holds a copy of that record, naming the group's file in
  `group_state`. So the host's check after each cell
  (dlrepro/run/gpu_restore.after_cell) finds the cell's file only when
  the worker died during it, and restores from it; once the worker has
  ended, the host checks the group's file (after_group).

An `observe` policy changes nothing and needs no record: each cell reads
the clocks itself, as a cell in its own process does.
"""
import copy
import os
import traceback

from .. import resultfile
from . import clocks
from .clockplan import verify
from .nvml import Nvml


class GroupClocks(object):
    """The worker's one ClockSession, on an NVML session of its own that
    stays open between cells (a cell's own NVML session ends with the cell).
    `module` stands in for pynvml in tests."""

    def __init__(self, module=None):
        self.module = module
        self.nvml = None
        self.session = None
        self.first_cell = None
        self.path = None
        self.cells = 0
        self.copy_path = None   # the running cell's state file

    def cell_begins(self, cell_state_path):
        """A cell starts: where its copy of the record goes, written now
        when the group already holds the clocks. Returns a warning or
        None."""
        self.copy_path = cell_state_path
        if self.session is None:
            return None
        return self._copy_to(cell_state_path)

    def cell_ends(self):
        """The running cell's copy removed (the worker, not the host,
        restores what the group holds), just before the worker says the
        cell is done. Returns a warning or None."""
        path, self.copy_path = self.copy_path, None
        if path is None:
            return None
        try:
            os.remove(path)
        except OSError as exc:
            if os.path.exists(path):
                return ("cannot remove the cell's copy of the group's clock "
                        "state {} ({}); the host may restore the clocks "
                        "while the group holds them".format(path, exc))
        return None

    def hold(self, policy, used, cell_state_path, datasheet_base, log):
        """The policy applied (on the first call: now) for a cell about to
        warm up, its GPUs `used` ((index, handle, info) each), and the
        cell's copy of the record written once it is first applied (the
        cells after have theirs from cell_begins). Returns (the session,
        what the cell records about the group: `group` of its gpu_clocks
        block, a warning or None)."""
        warning = None
        if self.session is None:
            self._apply(policy, used, cell_state_path, datasheet_base, log)
            self.copy_path = cell_state_path
            warning = self._copy_to(cell_state_path)
        self.cells += 1
        group = {"state_file": os.path.basename(self.path),
                 "first_cell": self.first_cell,
                 "cell_in_group": self.cells,
                 "checked_before_warmup": self._check()}
        return self.session, group, warning

    def _copy_to(self, cell_state_path):
        """The record, naming the group's file, where the host looks after
        this cell; a warning when it cannot be written."""
        if self.session.state is None:
            return None
        record = dict(self.session.state,
                      group_state=os.path.basename(self.path))
        try:
            resultfile.write_atomic(cell_state_path, record)
        except (IOError, OSError) as exc:
            return ("cannot write the group's clock state to the cell's "
                    "state file {} ({}); after a crash restore from {}".format(
                        cell_state_path, exc, self.path))
        return None

    def _apply(self, policy, used, cell_state_path, datasheet_base, log):
        self.nvml, reason = Nvml.open(self.module)
        if self.nvml is None:
            raise RuntimeError("NVML opened for the cell but not for its "
                               "group ({})".format(reason))
        gpus = [(index, self.nvml.call("nvmlDeviceGetHandleByIndex", index),
                 info) for index, _handle, info in used]
        self.path = clocks.group_state_path(cell_state_path)
        self.first_cell = _cell_name(cell_state_path)
        self.session = clocks.ClockSession(
            self.nvml, policy, gpus, self.path,
            datasheet_base=datasheet_base, log=log)
        self.session.apply()

    def _check(self):
        """The clocks as read before a cell's warm-up against what the policy
        set (locked clocks have no getter: telemetry's SM clock is their
        check, per cell)."""
        checked = []
        for (index, handle, _info), record in zip(self.session.gpus,
                                                  self.session.records):
            if not record["applied"]:
                continue
            found = verify(self.nvml, handle, record["applied"])
            checked.append({"index": index, "ok": found["ok"],
                            "checks": found["checks"], "note": found["note"]})
        return checked

    def records(self):
        """The per-GPU records as a cell's result takes them: a copy, which
        the cell's own checks may add to."""
        return copy.deepcopy(self.session.records)

    def restore(self):
        """Restore what the policy changed and end NVML; idempotent.
        Failures go to the log and the state file (the host restores from
        it)."""
        session, self.session = self.session, None
        nvml, self.nvml = self.nvml, None
        try:
            if session is not None:
                session.restore()
        except Exception:
            traceback.print_exc()
        finally:
            if nvml is not None:
                nvml.close()


def _cell_name(state_path):
    name = os.path.basename(state_path)
    for suffix in (".clock-state.json", ".json"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name
