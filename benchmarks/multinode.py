"""1 node x 2 workers beside 2 nodes x 1 worker, per framework, in one run.

    SLURM_CONF=/etc/slurm-nodes/slurm.conf .venv/bin/python benchmarks/multinode.py \
        [--framework pytorch --framework tensorflow] [--epochs 2] [--out DIR] \
        [--runtime native|podman|charliecloud]

For each framework: `invoke converge --workers 2` on this host (the local
executor) and `invoke converge --workers 2 --nodes 2 --executor slurm` on
the two-node cluster (.ci/slurm-nodes.sh; docs/multinode.md), the same
runtime for both (native unless --runtime; a container runtime reads the
image settings from the environment, e.g. DLREPRO_IMAGE_PREFIX,
DLREPRO_BASE_OVERRIDES, DLREPRO_CH_IMAGES as the tests set them), the same
tiny synthetic fcn-r training at the same global batch.
Prints, side by side: the largest relative loss-curve difference between
the two, the wall time of each job (as the pipeline measured it: the
whole harness, start-up included; for the Slurm job, inside its task),
the training time the harness measured, and the mean time per iteration.

On the test cluster both "nodes" are network namespaces of one machine:
the two layouts share its CPUs, and 2 nodes x 1 worker pays for the bridge
(TCP through veth pairs) where 1 node x 2 workers talks over loopback.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INVOKE = str(Path(sys.executable).parent / "invoke")
DEFAULT_CONF = "/etc/slurm-nodes/slurm.conf"


def converge(out, framework, epochs, extra, runtime="native"):
    argv = [INVOKE, "converge", "--framework", framework, "--network",
            "fcn-r", "--synthetic", "--train-samples", "1024",
            "--test-samples", "256", "--global-batch-size", "64",
            "--epochs", str(epochs), "--runtime", runtime, "--workers", "2",
            "--timeout", "600", "--out", str(out)] + extra
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    run_dir = Path(out).joinpath("latest-converge").resolve()
    record = json.loads((run_dir / "run.json").read_text())
    entry, = record["jobs"]
    result = json.loads((run_dir / f"{entry['id']}.json").read_text())
    if result["status"] != "ok":
        sys.exit(f"{entry['id']}: {result['status']}: {result['error']}")
    return {"command_s": took, "job_s": entry["wall_s"],
            "training_s": result["convergence"]["training_s"],
            "per_iteration_s": result["timing"]["mean_s"],
            "loss": result["convergence"]["curve"]["loss"],
            "transport": (result["convergence"].get("cluster") or {}).get(
                "transport") or result["convergence"].get("mechanism")}


def max_relative(a, b):
    return max(abs(x - y) / max(abs(x), abs(y), 1e-12) for x, y in zip(a, b))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--framework", action="append")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--runtime", default="native")
    args = parser.parse_args(argv)
    os.environ.setdefault("SLURM_CONF", DEFAULT_CONF)
    frameworks = args.framework or ["pytorch", "tensorflow"]
    out = Path(args.out or tempfile.mkdtemp(prefix="dlrepro-multinode-"))
    rows = []
    for framework in frameworks:
        one = converge(out / f"{framework}-1x2", framework, args.epochs, [],
                       args.runtime)
        two = converge(out / f"{framework}-2x1", framework, args.epochs,
                       ["--nodes", "2", "--executor", "slurm"], args.runtime)
        rows.append((framework, one, two))
    print(f"fcn-r, synthetic MNIST shape, 1024 samples, global batch 64, "
          f"{args.epochs} epochs, {args.runtime} runtime; "
          f"SLURM_CONF={os.environ['SLURM_CONF']}")
    head = (f"{'framework':<11}{'layout':<16}{'iters':>6}{'max rel diff':>14}"
            f"{'job wall s':>12}{'training s':>12}{'s/iter':>10}"
            f"{'command s':>11}  transport")
    print(head)
    for framework, one, two in rows:
        diff = max_relative(one["loss"], two["loss"])
        for layout, side, shown in (("1 node x 2", one, "-"),
                                    ("2 nodes x 1", two, f"{diff:.2e}")):
            print(f"{framework:<11}{layout:<16}{len(side['loss']):>6}"
                  f"{shown:>14}{side['job_s']:>12.2f}"
                  f"{side['training_s']:>12.2f}"
                  f"{side['per_iteration_s']:>10.4f}"
                  f"{side['command_s']:>11.1f}  {side['transport']}")
    print(f"run folders: {out}")


if __name__ == "__main__":
    main()
