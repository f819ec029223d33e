"""How much does the harness add to a training iteration?

Times the harness's loop (harness.timing.run_loop over the PyTorch backend's
session) against a minimal hand-written PyTorch loop over the same model and
the same batch, in the same process, alternating blocks of iterations
(ABAB...) so that drift and background load hit both alike. Prints the ratio
of mean iteration times per network; the goal is within 3%.

    .venv/bin/invoke overhead                    # in .venvs/pytorch-cpu
    PYTHONPATH=. .venvs/pytorch-cpu/bin/python benchmarks/harness_overhead.py \
        [--rounds 10] [--block 5] [--threads 2] [--json]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import networks, threads  # noqa: E402
from harness.timing import run_loop  # noqa: E402

# fcn5 and resnet-56 for the harness's overhead (issue 2); alexnet-r too for
# the per-framework comparison with an idiomatic loop (issue 4).
CASES = (("fcn5", 64), ("alexnet-r", 128), ("resnet-56", 16))


def hand_written_loop(model, inputs, labels, lr, momentum, iterations):
    """What a user would write: returns seconds per iteration (mean)."""
    import torch
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    criterion = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for _ in range(iterations):
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(inputs), labels)
        loss.backward()
        optimizer.step()
        loss.item()
    return (time.perf_counter() - start) / iterations


def measure(name, batch, rounds, block, warmup):
    from harness.frameworks.pytorch import backend
    network = networks.get(name)
    session = backend.prepare(network, batch, "cpu", seed=0)
    run_loop(session.step, iterations=0, warmup=warmup)
    hand_written_loop(session.model, session.inputs, session.labels,
                      network.learning_rate, network.momentum, warmup)
    harness_means, hand_means = [], []
    for _ in range(rounds):
        series = run_loop(session.step, iterations=block, warmup=0)
        harness_means.append(statistics.mean(series.times))
        hand_means.append(hand_written_loop(
            session.model, session.inputs, session.labels,
            network.learning_rate, network.momentum, block))
    ratios = [h / m for h, m in zip(harness_means, hand_means)]
    return {
        "network": name, "batch_size": batch, "rounds": rounds, "block": block,
        "harness_mean_s": statistics.mean(harness_means),
        "hand_mean_s": statistics.mean(hand_means),
        "ratio_of_means": (statistics.mean(harness_means)
                           / statistics.mean(hand_means)),
        "median_round_ratio": statistics.median(ratios),
        "round_ratios": ratios,
    }


def format_rows(rows):
    lines = ["network    batch  harness s/iter  hand s/iter  ratio  "
             "median round ratio"]
    for r in rows:
        lines.append("{:<10} {:>5}  {:>14.4f}  {:>11.4f}  {:>5.3f}  {:>18.3f}"
                     .format(r["network"], r["batch_size"], r["harness_mean_s"],
                             r["hand_mean_s"], r["ratio_of_means"],
                             r["median_round_ratio"]))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    threads.apply(args.threads)  # before torch loads
    import torch
    torch.set_num_threads(args.threads)
    rows = [measure(name, batch, args.rounds, args.block, args.warmup)
            for name, batch in CASES]
    if args.json:
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print("torch {}, {} threads".format(torch.__version__, args.threads))
        print("\n".join(format_rows(rows)))


if __name__ == "__main__":
    main()
