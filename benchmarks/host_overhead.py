"""What the host side costs per cell, before and after a change, side by
side: the time from the start of a cell to its result on disk (run.json's
`wall_s`) minus the harness process's own lifetime, for `invoke bench` of
two checkouts run in alternating rounds on the same machine.

    .venv/bin/python benchmarks/host_overhead.py --before /tmp/before \
        [--rounds 5] [--networks fcn5,fcn8,alexnet]

--before is another checkout of this repository (e.g. `git worktree add
/tmp/before <commit>`); each tree runs its own sweep and its own harness,
natively, with the PyTorch environment of this tree (.venvs/pytorch-cpu)
behind a wrapper that records when the harness process started and ended.
Prints per tree the mean and median host overhead per cell and the ratio
after/before.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRAPPER = """#!{python}
import os, subprocess, sys, time
start = time.time()
code = subprocess.call([{real!r}] + sys.argv[1:])
with open(os.environ["DLREPRO_HARNESS_TIMES"], "a") as log:
    log.write("%s %f %f\\n" % (" ".join(sys.argv[1:]), start, time.time()))
sys.exit(code)
"""


def wrapper(folder, real):
    path = Path(folder) / "timed-python"
    path.write_text(WRAPPER.format(python=sys.executable, real=str(real)))
    path.chmod(0o755)
    return path


def bench(tree, out, python, networks, times):
    args = [str(ROOT / ".venv" / "bin" / "invoke"), "bench", "--framework",
            "pytorch", "--runtime", "native", "--python", str(python),
            "--iterations", "5", "--warmup", "1", "--threads", "1",
            "--out", str(out)]
    for network in networks:
        args += ["--network", network]
    env = dict(os.environ, DLREPRO_HARNESS_TIMES=str(times))
    subprocess.run(args, cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    record = json.loads(((out / "latest").resolve() / "run.json").read_text())
    return record.get("jobs") or record.get("cells")


def overheads(entries, times):
    """Host seconds per cell: its wall time minus its harness's lifetime."""
    lifetimes = {}
    for line in Path(times).read_text().splitlines():
        argv, start, end = line.rsplit(" ", 2)
        if "--out " not in argv:
            continue  # the runtime's check that the interpreter runs
        out = argv.split("--out ", 1)[1].split()[0]
        lifetimes[Path(out).stem] = float(end) - float(start)
    return [e["wall_s"] - lifetimes[e["id"]] for e in entries]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--networks", default="fcn5,fcn8,alexnet")
    args = parser.parse_args(argv)
    networks = args.networks.split(",")
    real = ROOT / ".venvs" / "pytorch-cpu" / "bin" / "python"
    trees = {"before": args.before.resolve(), "after": ROOT}
    found = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as scratch:
        python = wrapper(scratch, real)
        for round_ in range(args.rounds):
            for name, tree in trees.items():
                out = Path(scratch) / f"{name}-{round_}"
                times = Path(scratch) / f"{name}-{round_}.times"
                entries = bench(tree, out, python, networks, times)
                found[name] += overheads(entries, times)
    for name, values in found.items():
        print(f"{name:<7} host overhead per cell: mean "
              f"{statistics.mean(values) * 1e3:7.1f} ms, median "
              f"{statistics.median(values) * 1e3:7.1f} ms "
              f"({len(values)} cells, {args.rounds} alternating rounds)")
    ratio = statistics.mean(found["after"]) / statistics.mean(found["before"])
    print(f"after/before (means): {ratio:.2f}")


if __name__ == "__main__":
    main()
