"""How long PyTorch's torch.compile cells compile under fork and under
cell, before and after each forked cell got a temp dir of its own
(harness/celltemp.py), natively, in alternating rounds:

    git worktree add /tmp/before 94fe763~1
    ln -s $PWD/.venv $PWD/.venvs /tmp/before/
    .venv/bin/python \
        docs/measurements/fork-compile-cache-2026-12-07/compile_cache.py \
        --before /tmp/before --rounds 2 --out /tmp/compile-cache

Each run is the smoke suite's fcn5 and fcn8 (batch 16, 2 threads, 2
warm-up and 5 timed iterations) with `--compile default`; compilation
happens in the first warm-up iteration, whose time each result records
(`compilation.first_iteration_s`). Under fork, fcn8 is the server's second
cell. The second round runs in the reverse order.
"""
import argparse
import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
NETWORKS = ("fcn5", "fcn8")


def run(root, mode, out):
    """{network: (first iteration s, median timed s)} of one run."""
    subprocess.run([str(root / ".venv" / "bin" / "invoke"), "bench",
                    "--framework", "pytorch", "--suite", "smoke",
                    "--network", NETWORKS[0], "--network", NETWORKS[1],
                    "--compile", "default", "--runtime", "native",
                    "--isolation", mode, "--out", str(out)], cwd=root,
                   check=True, stdout=subprocess.DEVNULL)
    found = {}
    for path in (out / "latest").glob("*.json"):
        result = json.loads(path.read_text())
        if "compilation" not in result or result["status"] != "ok":
            continue
        found[result["cell"]["network"]] = (
            result["compilation"]["first_iteration_s"],
            result["timing"]["median_s"])
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="/tmp/compile-cache", type=Path)
    args = parser.parse_args()
    runs = [("before", args.before, "fork"), ("after", ROOT, "fork"),
            ("after", ROOT, "cell"), ("before", args.before, "cell")]
    print("checkout mode  " + "  ".join(
        "{} first iteration, timed median".format(n) for n in NETWORKS))
    for index in range(args.rounds):
        for name, root, mode in runs if index % 2 == 0 else runs[::-1]:
            found = run(root, mode, args.out / "{}-{}-{}".format(
                index, name, mode))
            print("{:8s} {:5s} ".format(name, mode) + "  ".join(
                "{:6.2f} s, {:.3f} s".format(*found[n]) if n in found
                else "(no ok result)" for n in NETWORKS), flush=True)


if __name__ == "__main__":
    main()
