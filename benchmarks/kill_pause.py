"""Kill and pause: does `invoke bench` keep every finished result, and end
every process it started, whatever a hostile user does? Per isolation mode,
rounds of a tiny native PyTorch sweep (three cells of seconds, a short
--timeout), attacked at random moments (seeded, the seed printed) by:

- pause: SIGSTOP to invoke's process group (as Ctrl-Z), SIGCONT after 1 s
  to 1.5 timeouts (a third outlast the timeout) while the cell runs on;
- Ctrl-C pair: two SIGINTs to invoke's process group, 0.05-1 s apart;
- stalled Ctrl-C pair: the sweep's processes outside invoke's group stopped
  first (as one that does not die at once on SIGTERM), then a Ctrl-C pair;
  what invoke leaves of them is continued once the run is complete.

After --cuts Ctrl-C pairs, `--resume` runs it to completion undisturbed;
the run folder is read every 0.2 s. Per mode, goal 0 each: changed
(results once ok in run.json and the file whose file differs at the end),
relabelled (files once complete on disk, schema-valid and ok, that end
saying anything else), outlived (processes alive once an `invoke` has
exited: the sweep's orphans, this script their subreaper, and any whose
command line, cwd, stdout or stderr names the round's folder), incomplete
(runs never complete). Exits 1 if one is missed.

    .venv/bin/python benchmarks/kill_pause.py [--rounds 4] [--seed N] [--mode
        cell ...] [--cuts 2] [--timeout 20] [--every 8] [--out DIR]
"""
import argparse
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.errors import UserError  # noqa: E402
from dlrepro.run import store  # noqa: E402
from dlrepro.run.process import signal_each  # noqa: E402
from harness import procstat  # noqa: E402

INVOKE = str(ROOT / ".venv" / "bin" / "invoke")
MODES = ("cell", "group", "fork")
SWEEP = ["bench", "--framework", "pytorch", "--runtime", "native",
         "--network", "lstm32", "--network", "fcn-r", "--network", "lstm64",
         "--iterations", "10", "--warmup", "1", "--threads", "1"]
GOALS = ("changed", "relabelled", "outlived", "incomplete")
EVENTS = ("pause", "long pause", "ctrl-c", "stalled ctrl-c")
# s: a stuck session is killed; what invoke left gets to end once continued.
SESSION_LIMIT_S, RELEASE_S = 600, 40


def processes():
    """{pid: (ppid, process group, state, start time)} of every process."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = procstat.stat_fields(entry.name)
        except (ValueError, OSError):
            continue
        found[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0],
                                  fields[19])
    return found


def names_folder(pid, folder):
    """Whether a process's command line, cwd, stdout or stderr name it."""
    try:
        return folder.encode() in Path(f"/proc/{pid}/cmdline").read_bytes() \
            or any(os.readlink(f"/proc/{pid}/{link}").startswith(folder)
                   for link in ("cwd", "fd/1", "fd/2"))
    except OSError:
        return False


def survivors(folder):
    """{(pid, start time)} of this script's children (the sweep's orphans,
    reparented here) and of processes naming `folder`."""
    table, me = processes(), os.getpid()
    for pid, row in table.items():
        if row[0] == me and row[2] == "Z":
            os.waitpid(pid, 0)  # an orphan that has ended since
    return {(pid, row[3]) for pid, row in table.items()
            if row[2] != "Z" and pid != me
            and (row[0] == me or names_folder(pid, folder))}


def record_of(out):
    """The run.json of the run under `out`, empty while there is none."""
    try:
        return store.read_run(Path(out) / "latest")
    except UserError:
        return {"jobs": [], "status": None}


def read_results(out):
    """[(run.json entry, valid result or None, bytes or None)] under `out`."""
    found = []
    for entry in record_of(out)["jobs"]:
        try:  # one read: the bytes kept are those checked
            raw = (Path(out) / "latest" / entry["file"]).read_bytes()
            result = json.loads(raw)
        except (OSError, ValueError):
            raw = result = None
        valid = result is not None and not store.validation_errors(result)
        found.append((entry, result if valid else None, raw))
    return found


def watch(out, accepted, ever_ok, stopping):
    """Every 0.2 s until `stopping`, then once more: into `ever_ok` files
    ever ok on disk, into `accepted` {file: first bytes} once run.json too."""
    while True:
        for entry, result, raw in read_results(out):
            if (result or {}).get("status") == "ok":
                ever_ok.add(entry["file"])
                if entry["status"] == "ok":
                    accepted.setdefault(entry["file"], raw)
        if stopping.is_set():
            return
        stopping.wait(0.2)


class Round:
    """A mode's round: --cuts sessions cut short, then resumed to the end."""

    def __init__(self, mode, number, rng, args):
        self.mode, self.rng, self.args = mode, rng, args
        self.out = Path(args.out) / mode / f"round{number}"
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        self.events, self.outlived, self.stalled = (
            dict.fromkeys(EVENTS, 0), set(), set())

    def play(self):
        """{goal: [what missed it]} of the round."""
        accepted, ever_ok, stopping, cuts = {}, set(), threading.Event(), 0
        watcher = threading.Thread(target=watch, args=(
            self.out, accepted, ever_ok, stopping))
        watcher.start()
        try:
            for _ in range(self.args.cuts + 3):
                # No --resume before the first run folder, as a user would.
                resume = (self.out / "latest").exists()
                if self.session(resume, cuts < self.args.cuts):
                    cuts += 1
                elif record_of(self.out)["status"] == "complete":
                    break
        finally:  # also when this script is interrupted: nothing left
            self.release()
            stopping.set()
            watcher.join()
        final = {entry["file"]: (result, raw)
                 for entry, result, raw in read_results(self.out)}
        return {"changed": sorted(f for f, raw in accepted.items()
                                  if final.get(f, (0, 0))[1] != raw),
                "relabelled": sorted(f for f in ever_ok if (
                    final.get(f, (0, 0))[0] or {}).get("status") != "ok"),
                "outlived": sorted(self.outlived),
                "incomplete": [] if record_of(self.out)["status"] == "complete"
                else [str(self.out)]}

    def session(self, resume, hostile):
        """One `invoke bench`, attacked at random moments while `hostile`
        until a Ctrl-C pair has landed; whether one did."""
        command = [INVOKE] + SWEEP + [
            "--isolation", self.mode, "--timeout", str(self.args.timeout),
            "--out", str(self.out)] + (["--resume"] if resume else [])
        with open(self.out / "sessions.log", "ab") as log:
            proc = subprocess.Popen(command, cwd=ROOT, stdout=log,
                                    stderr=subprocess.STDOUT,
                                    start_new_session=True)
        cut, limit = False, time.monotonic() + SESSION_LIMIT_S
        try:
            while proc.poll() is None and time.monotonic() < limit:
                if not hostile or cut:
                    time.sleep(0.2)
                    continue
                try:
                    proc.wait(self.rng.uniform(0.5, self.args.every))
                except subprocess.TimeoutExpired:
                    cut = self.attack(proc)
        finally:
            if proc.poll() is None:  # stuck, or this script interrupted
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            self.outlived |= survivors(os.path.join(self.out, ""))
        return cut

    def attack(self, proc):
        """One event; whether it was a Ctrl-C pair."""
        kind = self.rng.choice(["pause", "pause", "ctrl-c", "stalled ctrl-c"])
        if kind == "pause":
            seconds = self.rng.uniform(1.0, 1.5 * self.args.timeout)
            kind = "long pause" if seconds > self.args.timeout else kind
            os.killpg(proc.pid, signal.SIGSTOP)
            time.sleep(seconds)
            os.killpg(proc.pid, signal.SIGCONT)
        else:
            if kind == "stalled ctrl-c":
                table, below, frontier = processes(), set(), {proc.pid}
                while frontier:
                    frontier = {p for p, row in table.items()
                                if row[0] in frontier}
                    below |= frontier
                outside = {p for p in below if table[p][1] != proc.pid}
                signal_each(outside, signal.SIGSTOP)
                self.stalled |= {(p, table[p][3]) for p in outside}
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(self.rng.uniform(0.05, 1.0))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        self.events[kind] += 1
        return kind.endswith("ctrl-c")

    def release(self):
        """Continue what invoke left, let it write, then end it."""
        now = processes()
        left = {p for p, start in self.stalled | self.outlived
                if p in now and now[p][3] == start}
        signal_each(left, signal.SIGCONT)
        deadline = time.monotonic() + RELEASE_S
        while time.monotonic() < deadline and any(
                processes().get(p, (0, 0, "Z"))[2] != "Z" for p in left):
            time.sleep(0.2)
        signal_each(left & set(processes()), signal.SIGKILL)
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass  # not reparented here (a process naming the folder)


def table(tallies, rounds):
    lines = ["mode   rounds  pauses (long)  ctrl-c pairs (stalled)  "
             + "  ".join(GOALS)]
    for mode, n in tallies.items():
        lines.append(
            f"{mode:<6} {rounds:>6}  {n['pause'] + n['long pause']:>6} "
            f"({n['long pause']:>3})  {n['ctrl-c'] + n['stalled ctrl-c']:>12}"
            f" ({n['stalled ctrl-c']:>7})  "
            + "  ".join(f"{n[g]:>{len(g)}}" for g in GOALS))
    return lines + ["goal: 0 in each of " + ", ".join(GOALS)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int,
                        default=int.from_bytes(os.urandom(4), "big"))
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument("--cuts", type=int, default=2,
                        help="Ctrl-C pairs a round, each ending a session")
    parser.add_argument("--timeout", type=int, default=20,
                        help="a cell's --timeout, s")
    parser.add_argument("--every", type=float, default=8.0,
                        help="most seconds between two events")
    parser.add_argument("--out", default=str(ROOT / "results" /
                                             "kill-pause-bench"))
    args = parser.parse_args()
    if min(args.rounds, args.cuts, args.timeout) < 1:
        parser.error("--rounds, --cuts and --timeout must be at least 1")
    args.out = str(Path(args.out).resolve())
    print(f"seed {args.seed}", flush=True)
    rng = random.Random(args.seed)
    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans here
    # Started in the background (`&`, nohup), SIGINT is ignored, and so it
    # would be in invoke: its Ctrl-C pairs would test nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tallies = {m: dict.fromkeys(GOALS + EVENTS, 0) for m in args.mode or MODES}
    for number in range(1, args.rounds + 1):
        for mode in tallies:
            round_ = Round(mode, number, rng, args)
            found = round_.play()
            missed = {g: found[g] for g in GOALS if found[g]}
            print(f"round {number} {mode:<5}: "
                  + json.dumps({**round_.events, **missed}), flush=True)
            for key, count in {**round_.events, **found}.items():
                tallies[mode][key] += count if key in EVENTS else len(count)
    print("\n" + "\n".join(table(tallies, args.rounds)))
    sys.exit(1 if any(t[g] for t in tallies.values() for g in GOALS) else 0)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted; every process the round started has ended")
