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
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import networks, threads  # noqa: E402
from harness.timing import run_loop  # noqa: E402
import sidebyside  # noqa: E402

# fcn5 and resnet-56 for the harness's overhead; alexnet-r too, so that the
# cases are those of the idiomatic_<framework>.py comparisons.
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
    return sidebyside.block_case(name, batch, rounds, block, "hand",
                                 harness_means, hand_means, ratios)


def format_rows(rows):
    return sidebyside.rows_table(rows, (
        ("harness s/iter", "harness_mean_s", 4),
        ("hand s/iter", "hand_mean_s", 4), ("ratio", "ratio_of_means", 3),
        ("median round ratio", "median_round_ratio", 3)))


def main():
    args = sidebyside.block_parser(__doc__.splitlines()[0], 10).parse_args()
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
