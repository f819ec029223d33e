"""Each runtime's cost against native on one cell, side by side: the
start-up of an empty process (`python -c pass` in the image, launched
exactly as a job is), a whole job's wall time, and the cell's mean
iteration time, in rounds that visit the runtimes in turn so that a
machine's load drifts over all of them alike.

    .venv/bin/python benchmarks/runtime_overhead.py --framework mxnet \
        --network fcn5 --rounds 5 --out results/runtime-overhead

Needs the framework's native venv, its docker image (prefix and base
overrides as for `invoke bench`), podman and a charliecloud conversion
(`invoke ch-convert`). Prints a table; writes overhead.json in --out.
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.resultfile import write_atomic  # noqa: E402

from dlrepro import matrix  # noqa: E402
from dlrepro.bench import plan  # noqa: E402
from dlrepro.run import pipeline, store  # noqa: E402
from dlrepro.run.runtimes import get  # noqa: E402

RUNTIMES = ("native", "docker", "podman", "charliecloud")
EMPTY = ["-c", "pass"]


def empty_argv(name, launch):
    """The job's command line with the harness replaced by `python -c
    pass`: what the runtime costs before the harness starts."""
    argv = launch.argv
    if name == "native":
        return [argv[0]] + EMPTY
    if name == "charliecloud":
        end = len(argv) - argv[::-1].index("--")
        return argv[:end + 1] + EMPTY
    python = next(i for i, item in enumerate(argv)
                  if item.endswith("/bin/python"))
    return argv[:python + 1] + EMPTY


def startup_s(name, rt, job, run_dir):
    launch = rt.launch(job, run_dir)
    started = time.perf_counter()
    subprocess.run(empty_argv(name, launch), env=launch.env, cwd=launch.cwd,
                   check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    rt.cleanup(job, run_dir)
    return elapsed


def main():
    """Flags, the rounds and the printed figures in one place. Long
    because a benchmark reads best top to bottom, as one script."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", default="mxnet")
    parser.add_argument("--network", default="fcn5")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="results/runtime-overhead")
    args = parser.parse_args()
    m = matrix.load()
    out = Path(args.out)
    runtimes = {name: get(name, matrix=m) for name in RUNTIMES}
    target = (args.framework, "cpu")
    for name, rt in runtimes.items():
        rt.check()
        reason = rt.prepare([target], log=lambda _m: None)[target]
        if reason:
            sys.exit(f"{name}: {reason}")
    figures = {name: {"startup_s": [], "wall_s": [], "mean_s": []}
               for name in RUNTIMES}
    for round_ in range(args.rounds):
        for name, rt in runtimes.items():
            cell = {"framework": args.framework, "profile": "cpu",
                    "network": args.network, "dataset": "synthetic",
                    "batch_size": args.batch_size,
                    "global_batch_size": args.batch_size, "device": "cpu",
                    "gpus": 0, "threads": 1, "iterations": args.iterations,
                    "warmup": 5, "runtime": name, "seed": 0,
                    "clock_policy": "observe"}
            job = plan.job_for(cell, 900)
            run_dir = out / name / f"round{round_}"
            run_dir.mkdir(parents=True, exist_ok=True)
            figures[name]["startup_s"].append(
                startup_s(name, rt, job, run_dir.resolve()))
            run = pipeline.Run(kind="bench", jobs=[job], out=run_dir,
                               name="overhead", command="runtime_overhead")
            done = pipeline.start(run, rt, m)
            _record, pairs = store.load_run(done)
            entry, result = pairs[0]
            if entry["status"] != "ok":
                sys.exit(f"{name}: {entry['status']}: {entry['message']}")
            figures[name]["wall_s"].append(entry["wall_s"])
            figures[name]["mean_s"].append(result["timing"]["mean_s"])
    native = {key: statistics.median(values)
              for key, values in figures["native"].items()}
    summary = {}
    print(f"{args.framework} {args.network} batch {args.batch_size}, 1 "
          f"thread, {args.iterations} iterations, medians of {args.rounds} "
          f"rounds")
    print(f"{'runtime':13} {'start-up s':>10} {'+ vs native':>11} "
          f"{'job wall s':>10} {'mean ms/iter':>12} {'ratio':>6}")
    for name in RUNTIMES:
        med = {key: statistics.median(values)
               for key, values in figures[name].items()}
        summary[name] = dict(med, ratio=med["mean_s"] / native["mean_s"],
                             startup_over_native_s=med["startup_s"]
                             - native["startup_s"], samples=figures[name])
        print(f"{name:13} {med['startup_s']:10.2f} "
              f"{med['startup_s'] - native['startup_s']:11.2f} "
              f"{med['wall_s']:10.2f} {med['mean_s'] * 1000:12.2f} "
              f"{summary[name]['ratio']:6.3f}")
    write_atomic(str(out / "overhead.json"), {"args": vars(args),
                                              "runtimes": summary})


if __name__ == "__main__":
    main()
