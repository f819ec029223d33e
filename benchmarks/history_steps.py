"""The step detector (dlrepro.history.steps) on synthetic histories with
known truth: false positives on flat noisy histories, detections of 5%
steps. Prints one line per setting.

    .venv/bin/python benchmarks/history_steps.py [--trials 300] [--runs 30]

A flat history is `runs` run means with Gaussian noise of the given CV
(optionally each run made of `processes` process means); a stepped one is
the same with the level multiplied by 1.05 (or 0.95) from a run drawn
uniformly in [MIN_SIZE, runs - MIN_SIZE]. A flat history with any step
reported is a false positive; a stepped one is detected when a step is
reported within one run of the true one, in the right direction.
"""
import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dlrepro.history import steps  # noqa: E402


def history(rng, runs, cv, processes, step_at=None, factor=1.0):
    means, groups = [], []
    for index in range(runs):
        level = 0.1 * (factor if step_at is not None and index >= step_at
                       else 1.0)
        group = [level * (1 + rng.gauss(0, cv)) for _ in range(processes)]
        groups.append(group)
        means.append(sum(group) / len(group))
    return means, groups


def rates(rng, trials, runs, cv, processes, factor, penalty):
    false_positives = detected = 0
    for _ in range(trials):
        means, groups = history(rng, runs, cv, processes)
        false_positives += bool(steps.detect(means, groups, penalty=penalty))
        at = rng.randint(steps.MIN_SIZE, runs - steps.MIN_SIZE)
        means, groups = history(rng, runs, cv, processes, at, factor)
        found = steps.detect(means, groups, penalty=penalty)
        detected += any(abs(s.index - at) <= 1
                        and (s.ratio > 1) == (factor > 1) for s in found)
    return false_positives / trials, detected / trials


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=2016)
    parser.add_argument("--penalty", type=float, default=steps.PENALTY)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    print(f"step detector: {args.trials} flat and {args.trials} stepped "
          f"histories of {args.runs} runs per line; penalty {args.penalty}")
    print("noise CV  processes  step   false positives  detected  seconds")
    for cv, processes, factor in [(0.01, 1, 1.05), (0.02, 1, 1.05),
                                  (0.02, 1, 0.95), (0.02, 3, 1.05),
                                  (0.03, 1, 1.05), (0.05, 1, 1.05)]:
        started = time.perf_counter()
        fp, hit = rates(rng, args.trials, args.runs, cv, processes, factor,
                        args.penalty)
        print(f"{cv:>8.0%}  {processes:>9}  {factor - 1:>+5.0%}  "
              f"{fp:>15.1%}  {hit:>8.1%}  "
              f"{time.perf_counter() - started:>7.1f}")


if __name__ == "__main__":
    main()
