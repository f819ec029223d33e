"""PyTorch's smoke suite natively, from the code issue 41 was filed against
(e21b471) and from this checkout, in alternating rounds:

    git worktree add /tmp/then e21b471
    ln -s $PWD/.venv $PWD/.venvs /tmp/then/
    .venv/bin/python \
        docs/measurements/pytorch-smoke-ceiling-2026-12-07/then_and_now.py \
        --then /tmp/then --out /tmp/then-and-now

The old checkout shares this one's environments: the lock files are the
same, so neither makes its own. Then: group and cell (its default);
now: group and fork (the default). The second round runs in reverse.
"""
import argparse
from pathlib import Path

from ceiling import ROOT, bench, sweep_of


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--then", required=True, type=Path)
    parser.add_argument("--out", default="/tmp/then-and-now", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs = [("then", args.then, "group"), ("then", args.then, "cell"),
            ("now", ROOT, "group"), ("now", ROOT, "fork")]
    for index in range(args.rounds):
        for name, root, mode in runs if index % 2 == 0 else runs[::-1]:
            whole, run_dir = bench(
                args.out / "{}-{}-{}".format(index, name, mode), mode, root)
            sweep = sweep_of(run_dir)
            spent = sweep.spent
            print("{:4s} {:5s} whole {:5.1f} s, measured {:4.1f} s (warm-up "
                  "{:4.1f}, timed {:4.1f}), fraction {:.2f}, builds {:.1f} s"
                  .format(name, mode, whole, sweep.measured_s,
                          spent.get("warm-up", 0.0), spent.get("timed", 0.0),
                          sweep.measured_s / whole,
                          spent.get("model build", 0.0)), flush=True)


if __name__ == "__main__":
    main()
