"""GPU clocks after a cell: check that the harness restored what its clock
policy changed, and restore from the saved state when it could not (a
SIGKILL, the OOM killer, a container killed by the engine).

The harness writes `<cell>.clock-state.json` next to the result (on the host
side of a container's mount) before it changes anything, records every
change with the call that undoes it, and marks the file `restored` when it
has undone them (harness/gpu/clocks.py). A file still `pending`, `changed` or
`restore-failed` means the GPU may still run at the policy's clocks: the
sweep calls `after_cell`, and `invoke gpu-restore` replays such files by
hand. Restoring needs the same privileges as setting (root on the host).

A group's worker (`python -m harness worker`, harness/gpu/clockgroup.py) holds
its policy across its cells in `<first>.worker.clock-state.json`, and
copies that record to each cell's file only while the cell runs: a cell's
file found outstanding means the worker died during it, and both are
restored; the sweep calls `after_group` once the worker has ended.
"""
import json
from pathlib import Path

from harness import resultfile
from harness.gpu import clocks
from harness.gpu.nvml import Nvml

from dlrepro.run import store
from dlrepro.run.paths import CLOCK_STATE_GLOB
from dlrepro.errors import UserError, read_text

STATE_GLOB = CLOCK_STATE_GLOB
# Every status harness/gpu/clocks.py writes: outstanding ones, and those
# with nothing left to undo.
STATUSES = clocks.OUTSTANDING + ("restored", "unchanged")


def load_state(path):
    """A state file as a dict; UserError when it is not one."""
    path = Path(path)
    try:
        state = json.loads(read_text(path))
    except ValueError as exc:
        raise UserError(f"{path} is not valid JSON: {exc}")
    if not isinstance(state, dict) or \
            state.get("format") != clocks.STATE_FORMAT:
        raise UserError(f"{path} is not a GPU clock-state file (no "
                        f"format {clocks.STATE_FORMAT!r})")
    if state.get("version") != clocks.STATE_VERSION:
        raise UserError(f"{path}: clock-state version {state.get('version')!r} "
                        f"is not supported (this version reads "
                        f"{clocks.STATE_VERSION})")
    return _checked_fields(path, state)


def _checked_fields(path, state):
    """`state`; UserError naming the first field of a clock-state file (a
    damaged one: the harness writes them whole) whose value restoring
    cannot use."""
    if state.get("status") not in STATUSES:
        raise UserError(f"{path}: status {state.get('status')!r} is not a "
                        f"clock-state status ({', '.join(STATUSES)})")
    for key, kinds, what in (("created_unix", (int, float), "a number"),
                             ("restored_by", str, "a string"),
                             ("host", str, "a string")):
        value = state.get(key)
        if value is not None and (isinstance(value, bool) or
                                  not isinstance(value, kinds)):
            raise UserError(f"{path}: {key} must be {what}, got {value!r}")
    gpus = state.get("gpus", [])
    if not (isinstance(gpus, list) and all(
            isinstance(g, dict) and isinstance(g.get("changes", []), list)
            and all(isinstance(c, dict) for c in g.get("changes", []))
            for g in gpus)):
        raise UserError(f"{path}: gpus must be a list of GPUs, each with a "
                        f"list of changes")
    return state


def outstanding(state):
    """Whether the GPU may still be changed by this state's policy."""
    return state.get("status") in clocks.OUTSTANDING


def _open_nvml(state, path, module):
    nvml, reason = Nvml.open(module)
    if nvml is None:
        raise UserError(f"cannot restore GPU clocks from {path}: {reason}; "
                        f"run this on {state.get('host') or 'the GPU host'}, "
                        f"as root")
    return nvml


def restore_file(path, module=None):
    """Undo the outstanding changes of one state file and mark it. Returns a
    one-line summary; UserError when an undo call failed."""
    path = Path(path)
    state = load_state(path)
    if not outstanding(state):
        return (f"{path.name}: nothing to restore (status {state['status']}"
                f"{', by ' + state['restored_by'] if state.get('restored_by') else ''})")
    nvml = _open_nvml(state, path, module)
    try:
        def handle_for(uuid):
            value, error = nvml.try_call("nvmlDeviceGetHandleByUUID", uuid)
            return value if error is None else None
        clocks.undo_changes(nvml, state, handle_for, by="host")
    finally:
        nvml.close()
    resultfile.write_atomic(str(path), state)
    changes = [(g, c) for g in state.get("gpus", [])
               for c in g.get("changes", [])]
    undone = [c for _g, c in changes if c.get("restored")]
    failed = [f"GPU {g.get('uuid')}: {c.get('undo_call')} -> "
              f"{c['restore_error']}" for g, c in changes
              if c.get("restore_error")]
    if failed:
        raise UserError(f"{path.name}: restore failed ({'; '.join(failed)}); "
                        f"NO_PERMISSION means: run as root")
    return f"{path.name}: restored ({len(undone)} change(s) undone)"


def find_states(run_dir):
    return sorted(Path(run_dir).glob(STATE_GLOB))


def restore_run(run_dir, module=None):
    """Restore every outstanding state file of a run, newest first, so that
    the oldest original settings are the ones left in place."""
    states = []
    for path in find_states(run_dir):
        state = load_state(path)
        states.append((state.get("created_unix") or 0, path, state))
    if not states:
        return [f"{run_dir}: no clock-state files (no cell changed GPU clocks)"]
    pending = sorted(((c, p) for c, p, s in states if outstanding(s)),
                     reverse=True)
    if not pending:
        return [f"{run_dir}: nothing to restore ({len(states)} clock-state "
                f"file(s), none outstanding)"]
    return [restore_file(path, module) for _created, path in pending]


def restore(state=None, run=None, out="results", module=None):
    """What `invoke gpu-restore` does: one file, or a run's files."""
    if state and run:
        raise UserError("give --state or --run, not both")
    if state:
        return [restore_file(state, module)]
    return restore_run(store.resolve_run(out, run or "latest"), module)


def state_path_for(result_path, clock_state=None):
    """Where the harness put the state file of the cell whose result is
    `result_path` (the spec's `clock_state`, or the default name)."""
    return Path(clocks.state_path(str(result_path), clock_state))


def after_cell(result_path, clock_state=None, restore=True, module=None):
    """Call when a cell's process has ended. None when its clock policy left
    nothing changed; else a one-line message saying what was found and, with
    `restore`, that it was restored (or how to restore it)."""
    return _check(state_path_for(result_path, clock_state), "the cell",
                  restore, module)


def after_group(path, restore=True, module=None):
    """Call when a group's worker has ended, with its clock-state file
    (harness.gpu.clocks.group_state_path): as after_cell."""
    return _check(Path(path), "the group's worker", restore, module)


def _check(path, who, restore, module):
    if not path.exists():
        return None
    try:
        state = load_state(path)
    except UserError as exc:
        return (f"{who}'s clock-state file is unreadable ({exc}); check "
                f"the GPU's clocks by hand (nvidia-smi -q -d CLOCK)")
    if not outstanding(state):
        return None
    found = (f"{who} left GPU clocks changed (clock-state {path.name}: "
             f"{state['status']})")
    if not restore:
        return f"{found}; run `invoke gpu-restore --state {path}`"
    try:
        done = restore_file(path, module)
    except UserError as exc:
        return f"{found}; restoring failed: {exc}"
    if state.get("group_state"):
        # A group's worker died during this cell: the group's own record is
        # restored too (its undo calls, made again, set the same originals).
        held = after_group(path.with_name(state["group_state"]), module=module)
        done = f"{done}; {held}" if held else done
    return f"{found}; {done}"
