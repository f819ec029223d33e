"""gpt-tiny and gpt-small on the CPU, per framework, side by side in one run.

    .venv/bin/python benchmarks/transformer_cpu.py [--iterations 10]
        [--warmup 2] [--threads 2] [--repeat 1] [--out DIR]

Runs `invoke bench --runtime native` (each framework in its native venv)
with cells of gpt-tiny (batch 8, its whole context of 64 tokens) and
gpt-small over 128 tokens (batch 1: one small batch; its full context of
1024 takes tens of seconds an iteration on two cores), every framework
that offers the transformer, in one sweep, so that the load of the machine
falls on all of them alike. Prints, per framework, each network's mean
iteration time with its 95 % CI (over iterations; over processes with
--repeat) and its achieved FLOP/s (the analytic executed FLOPs, 2 per
multiply-accumulate of the matrix products and of attention's, over the
mean), and the attention implementation each recorded.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.bench import aggregate  # noqa: E402
from dlrepro.run import store  # noqa: E402

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")
CASES = (("gpt-tiny", 8), ("gpt-small@128", 1))


def run_sweep(args, out):
    command = [str(ROOT / ".venv" / "bin" / "invoke"), "bench",
               "--runtime", "native", "--out", str(out),
               "--iterations", str(args.iterations),
               "--warmup", str(args.warmup), "--threads", str(args.threads),
               "--repeat", str(args.repeat), "--timeout", "3600"]
    for framework in FRAMEWORKS:
        command += ["--framework", framework]
    # --batch-size applies to every --network: one sweep per network, one
    # after the other in this run.
    runs = []
    for name, batch in CASES:
        proc = subprocess.run(
            command + ["--network", name, "--batch-size", str(batch)],
            cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit("invoke bench failed:\n" + proc.stdout[-3000:] +
                     proc.stderr[-3000:])
        runs.append(store.resolve_run(out))
    return runs


def rows(run_dirs):
    """{(framework, network): (results of its processes)}."""
    found = {}
    for run_dir in run_dirs:
        _record, pairs = store.load_run(run_dir)
        for entry, result in pairs:
            if result is None:
                continue
            cell = result["cell"]
            found.setdefault((cell["framework"], cell["network"]),
                             []).append(result)
    return found


def summary(results):
    """(status, mean s, CI half-width s, FLOP/s, attention) of a cell."""
    ok = [r for r in results if r["status"] == "ok"]
    if not ok:
        return results[0]["status"], None, None, None, None
    # The report's own estimate: over processes with --repeat, else over
    # the iterations of the one process.
    stats = aggregate.cell_stats(ok[0]["cell"], ok)
    mean, ci = stats.mean_s, stats.ci95_s
    half = (ci[1] - ci[0]) / 2
    flops = ok[0]["model"]["executed_flops_per_iteration"] / mean
    return "ok", mean, half, flops, ok[0]["model"].get("attention")


def table(found):
    lines = ["{:<11} {:>22} {:>10}   {:>22} {:>10}".format(
        "framework", "gpt-tiny b8 mean s", "GFLOP/s",
        "gpt-small@128 b1 mean s", "GFLOP/s")]
    attention = {}
    for framework in FRAMEWORKS:
        cols = []
        for name, _batch in CASES:
            status, mean, half, flops, att = summary(
                found.get((framework, name), [{"status": "missing"}]))
            if status != "ok":
                cols += [status, ""]
                continue
            cols += ["{:.4f} +- {:.4f}".format(mean, half or 0.0),
                     "{:.1f}".format(flops / 1e9)]
            attention[framework] = att
        lines.append("{:<11} {:>22} {:>10}   {:>22} {:>10}".format(
            framework, *cols))
    lines.append("")
    lines += ["{}: {}".format(f, a) for f, a in sorted(attention.items())]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default=None,
                        help="results folder (default: a temporary one)")
    args = parser.parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="transformer-cpu-"))
    found = rows(run_sweep(args, out))
    print("\n".join(table(found)))
    print("\nruns under {}".format(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
