"""Two-node training run many times, each against one node with two workers:
how often do the curves disagree?  (README.md beside this script,
"MXNet across two nodes": the divergence this was written to reproduce.)

    .venv/bin/python \
        docs/measurements/multinode-mxnet-2026-12-02/multinode_repeat.py \
        --framework mxnet --runs 20 [--epochs 2] [--load 2] [--seed 5]
        [--out FILE] [--slurm]

Harness level, as tests/test_multinode_harness_*.py run it: two node
processes of `python -m harness converge` on 127.0.0.1 / lo, each with its
own cluster object, no Slurm. With --slurm: `invoke converge --nodes 2
--executor slurm --runtime native` on the two-node test cluster
(SLURM_CONF, default /etc/slurm-nodes/slurm.conf; .ci/slurm-nodes.sh), as
benchmarks/multinode.py runs it, against one `invoke converge` of 1 node x
2 workers. Synthetic fcn-r, 1024 training samples, global batch 64. `--load K` runs K busy-looping processes beside every run
(bounded: they end with it), as CI's shared cores do. Prints one line per
run: both nodes' largest relative loss difference from the one-node curve,
their last test losses, the wall time; `--out` also writes them as JSON.
MXNet's workers trace their first two steps key by key (harness/frameworks/
mxnet/parallel.py, DLREPRO_MXNET_TRACE; not with --slurm): a diverging run
prints them, and `--out` keeps every run's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This folder is docs/measurements/<topic>/ of the repository; the
# loopback cluster is the tests' own (tests/loopback.py).
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from dlrepro.converge import plan as conv_plan  # noqa: E402
from loopback import (TRACE_ENV, cluster, first_steps,  # noqa: E402
                      free_port, trace_lines)

TOLERANCE = 1e-3


def spec(framework, workers, nodes, epochs, seed):
    conv = conv_plan.plan([framework], ["fcn-r"], [workers], global_batch=64,
                          epochs=epochs, seed=seed, threads=2 // nodes,
                          synthetic=True, train_samples=1024,
                          test_samples=256, runtime="native",
                          timeout=900)[0].spec
    return dict(conv, nodes=nodes)


def start(python, conv, cluster_object, out, trace=None):
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps({"convergence": conv, "container": None,
                                     "cluster": cluster_object}))
    log = open(str(out.with_suffix(".log")), "w")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if trace:
        env[TRACE_ENV] = trace
    try:
        return subprocess.Popen(
            [python, "-s", "-m", "harness", "converge", "--spec",
             str(spec_path), "--out", str(out)], cwd=str(ROOT),
            env=env, stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def result(out, process, limit=900):
    process.wait(limit)
    return json.loads(out.read_text())


def curve(data):
    return data["convergence"]["curve"]["loss"] or []


def test_losses(data):
    return [e["test_loss"] for e in data["convergence"]["per_epoch"]] or \
        [float("nan")]


def max_relative(a, b):
    """Over the common length; a curve cut short, or empty, is infinitely
    far."""
    if not b or len(b) < len(a):
        return float("inf")
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


INVOKE = str(Path(sys.executable).parent / "invoke")


def invoke_converge(out, framework, epochs, seed, extra):
    argv = [INVOKE, "converge", "--framework", framework, "--network",
            "fcn-r", "--synthetic", "--train-samples", "1024",
            "--test-samples", "256", "--global-batch-size", "64",
            "--epochs", str(epochs), "--seed", str(seed), "--runtime",
            "native", "--workers", "2", "--timeout", "600", "--out",
            str(out)] + extra
    proc = subprocess.run(argv, cwd=str(ROOT), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    if proc.returncode != 0:
        raise SystemExit("{} failed:\n{}".format(" ".join(argv), proc.stdout))
    run_dir = Path(out).joinpath("latest-converge").resolve()
    entry, = json.loads((run_dir / "run.json").read_text())["jobs"]
    node0 = json.loads((run_dir / "{}.json".format(entry["id"])).read_text())
    side = run_dir / "nodes" / "{}.node1.json".format(entry["id"])
    missing = {"status": "missing", "error": None,
               "convergence": {"curve": {"loss": []}, "per_epoch": []}}
    nodes = [node0, json.loads(side.read_text()) if side.exists()
             else missing]
    return nodes, entry.get("wall_s")


def slurm_run(tmp, run, args):
    nodes, job_s = invoke_converge(tmp / "run{}".format(run), args.framework,
                                   args.epochs, args.seed,
                                   ["--nodes", "2", "--executor", "slurm"])
    return nodes, job_s


def burners(count):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(count)]


def main():
    """Flags, the rounds and the printed figures in one place. Long
    because a benchmark reads best top to bottom, as one script."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--framework", default="mxnet")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--load", type=int, default=0)
    parser.add_argument("--out")
    parser.add_argument("--slurm", action="store_true")
    args = parser.parse_args()
    python = str(ROOT / ".venvs" / "{}-cpu".format(args.framework) / "bin" /
                 "python")
    records = []
    if args.slurm:
        os.environ.setdefault("SLURM_CONF", "/etc/slurm-nodes/slurm.conf")
    with tempfile.TemporaryDirectory(prefix="multinode-repeat-") as tmp:
        tmp = Path(tmp)
        out = tmp / "single.json"
        if args.slurm:
            single = invoke_converge(tmp / "single", args.framework,
                                     args.epochs, args.seed, [])[0][0]
        else:
            single = result(out, start(python, spec(args.framework, 2, 1,
                                                    args.epochs, args.seed),
                                       None, out))
        base = curve(single)
        print("1 node x 2: last test loss {}".format(test_losses(single)[-1]),
              flush=True)
        conv = spec(args.framework, 2, 2, args.epochs, args.seed)
        for run in range(1, args.runs + 1):
            port = free_port()
            outs = [tmp / "run{}-node{}.json".format(run, r) for r in (0, 1)]
            load = burners(args.load)
            started = time.monotonic()
            job_s = None
            trace = None
            try:
                if args.slurm:
                    nodes, job_s = slurm_run(tmp, run, args)
                else:
                    trace = str(tmp / "run{}-trace".format(run)) \
                        if args.framework == "mxnet" else None
                    processes = [
                        start(python, conv, cluster(2, r, port, 120), o,
                              trace)
                        for r, o in enumerate(outs)]
                    nodes = [result(o, p) for o, p in zip(outs, processes)]
            finally:
                for burner in load:
                    burner.kill()
                    burner.wait()
            wall = time.monotonic() - started
            traced = first_steps(trace) if trace else []
            record = {"run": run, "wall_s": round(wall, 1), "job_s": job_s,
                      "status": [n["status"] for n in nodes],
                      "error": (nodes[0].get("error") or {}).get("type"),
                      "max_relative": [max_relative(base, curve(n))
                                       for n in nodes],
                      "test_loss": [test_losses(n)[-1] for n in nodes],
                      "first_steps": traced}
            records.append(record)
            print("run {run}: max rel. diff node0 {d[0]:.2e} node1 {d[1]:.2e}"
                  " test loss {t[0]:.6g} / {t[1]:.6g} wall {w:.1f} s {s}{bad}"
                  .format(run=run, d=record["max_relative"],
                          t=record["test_loss"], w=wall,
                          s="/".join(record["status"]) + (
                              " " + record["error"] if record["error"]
                              else ""),
                          bad="  DIVERGED" if max(record["max_relative"]) >
                          TOLERANCE else ""), flush=True)
            if max(record["max_relative"]) > TOLERANCE:
                print("\n".join(trace_lines(traced)), flush=True)
    bad = sum(max(r["max_relative"]) > TOLERANCE or
              any(s != "ok" for s in r["status"]) for r in records)
    print("{} of {} runs beyond {:g}; largest difference {:.2e}".format(
        bad, len(records), TOLERANCE,
        max(max(r["max_relative"]) for r in records)))
    if args.out:
        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
