"""The harness against a plain, idiomatic Gluon training loop (issue 4).

For fcn5 (batch 64), alexnet-r (batch 128) and resnet-56 (batch 16) on the
CPU: the harness's mean iteration time (harness.timing.run_loop over the
MXNet backend's Session.step) against the loop an MXNet user writes
(autograd.record, backward, trainer.step, loss.asscalar()) on the same
model, built by the same translation and hybridized the same way. The two
are measured alternately, in rounds, in one process, so that drifting load
on the machine hits both alike. Goal: ratios within 5%.

Run it in the MXNet environment from the repository root:

    PYTHONPATH=. .venvs/mxnet-cpu/bin/python benchmarks/idiomatic_mxnet.py
    ... --json            (the same figures as JSON)

This is a measurement to report, not a test: timings on a shared machine
are noisy, which is why per-round ratios are shown next to the overall one.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import provenance, threads as thread_env  # noqa: E402
from harness import networks as nets, timing  # noqa: E402

CASES = (("fcn5", 64), ("alexnet-r", 128), ("resnet-56", 16))
GOAL = 0.05


def idiomatic_step(backend, network, batch_size, seed):
    """The training step an MXNet user writes, on the same model: the loss
    read back with asscalar() ends the iteration."""
    import mxnet as mx
    from mxnet import autograd, gluon
    mx.random.seed(seed)
    model = backend.hybridize(backend.build_model(network))
    loss_fn = backend.hybridize(gluon.loss.SoftmaxCrossEntropyLoss())
    trainer = gluon.Trainer(model.collect_params(), "sgd",
                            {"learning_rate": network.learning_rate,
                             "momentum": network.momentum}, kvstore=None)
    shape = (batch_size,) + tuple(network.input_shape)
    x = mx.nd.random.normal(0, 1, shape=shape)
    y = mx.nd.random.randint(0, network.classes, shape=(batch_size,)).astype(
        "float32")

    def step():
        with autograd.record():
            loss = loss_fn(model(x), y)
        loss.backward()
        trainer.step(batch_size)
        return loss.mean().asscalar()
    return step


def plain_loop(step, iterations, primer=1, clock=time.perf_counter,
               cpu_clock=time.process_time):
    """(seconds per iteration, process CPU seconds of them all), timed the
    simplest way after `primer` untimed iterations."""
    for _ in range(primer):
        step()
    times = []
    cpu_start = cpu_clock()
    previous = clock()
    for _ in range(iterations):
        step()
        now = clock()
        times.append(now - previous)
        previous = now
    return times, cpu_clock() - cpu_start


def measure(backend, name, batch_size, rounds, iterations, warmup, seed):
    """Alternating rounds of the harness and the idiomatic loop; raw
    seconds per iteration of each, the per-round ratios of the means, and
    process CPU seconds per iteration (all threads), which a busy machine
    disturbs less than wall time when MXNet runs one thread.

    The idiomatic loop stops waiting when its loss is ready, while backward
    and update still run. So each side starts from an idle engine (waitall)
    and one untimed iteration: the timed ones then hold exactly `iterations`
    iterations of work (the first pays for the primer's tail, the last leaves
    its own), and no side's leftover work lands in the other's times.
    """
    import mxnet as mx
    network = nets.get(name)
    session = backend.prepare(network, batch_size, "cpu", seed)
    plain = idiomatic_step(backend, network, batch_size, seed)
    for _ in range(warmup):
        session.step()
        plain()
    sides = {"harness": [], "idiomatic": []}
    cpu = {"harness": 0.0, "idiomatic": 0.0}
    per_round = []
    for index in range(rounds):
        means = {}
        # Alternate which side goes first, so neither always follows the
        # other's memory traffic.
        order = ("harness", "idiomatic") if index % 2 == 0 else \
            ("idiomatic", "harness")
        for side in order:
            mx.nd.waitall()
            if side == "harness":
                series = timing.run_loop(session.step, iterations, 1)
                times, cpu_s = series.times, series.cpu_s
            else:
                times, cpu_s = plain_loop(plain, iterations, primer=1)
            sides[side].extend(times)
            cpu[side] += cpu_s
            means[side] = sum(times) / len(times)
        per_round.append(means["harness"] / means["idiomatic"])
    harness_mean = sum(sides["harness"]) / len(sides["harness"])
    idiomatic_mean = sum(sides["idiomatic"]) / len(sides["idiomatic"])
    count = rounds * iterations
    return {"network": name, "batch_size": batch_size,
            "harness_mean_s": harness_mean,
            "idiomatic_mean_s": idiomatic_mean,
            "ratio": harness_mean / idiomatic_mean,
            "round_ratios": per_round,
            "harness_cpu_s": cpu["harness"] / count,
            "idiomatic_cpu_s": cpu["idiomatic"] / count,
            "cpu_ratio": cpu["harness"] / cpu["idiomatic"],
            "harness_s": sides["harness"], "idiomatic_s": sides["idiomatic"]}


def format_table(report):
    """Lines of the table for a report from main()."""
    lines = ["MXNet {} on CPU, {} thread(s): harness vs idiomatic Gluon loop "
             "({} rounds x {} iterations each)".format(
                 report["framework_version"], report["threads"],
                 report["rounds"], report["iterations"]),
             "{:<10} {:>5} {:>11} {:>13} {:>6} {:>13} {:>10}  {}".format(
                 "network", "batch", "harness ms", "idiomatic ms", "ratio",
                 "round ratios", "CPU ratio", "within 5%")]
    for case in report["cases"]:
        lines.append(
            "{:<10} {:>5} {:>11.2f} {:>13.2f} {:>6.3f} {:>13} {:>10.3f}  {}"
            .format(case["network"], case["batch_size"],
                    case["harness_mean_s"] * 1e3,
                    case["idiomatic_mean_s"] * 1e3, case["ratio"],
                    "{:.2f}..{:.2f}".format(min(case["round_ratios"]),
                                            max(case["round_ratios"])),
                    case["cpu_ratio"],
                    "yes" if abs(case["ratio"] - 1) <= GOAL else "no"))
    lines.append("ratio: harness mean / idiomatic mean wall time per "
                 "iteration; round ratios: its spread over the rounds;")
    lines.append("CPU ratio: the same for process CPU seconds per iteration "
                 "(all threads); steadier than wall time on a busy machine")
    lines.append("with one thread (with more, OpenMP threads spinning at "
                 "barriers for a descheduled teammate inflate it too).")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int,
                        default=provenance.usable_cpus(),
                        help="threads for MXNet (default: usable CPUs)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="alternating rounds per network (default 4)")
    parser.add_argument("--iterations", type=int, default=8,
                        help="timed iterations per side and round (default 8)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed iterations per side first (default 3)")
    parser.add_argument("--network", action="append",
                        choices=[name for name, _ in CASES],
                        help="only this network (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON instead of a table")
    args = parser.parse_args(argv)
    for option in ("threads", "rounds", "iterations"):
        if getattr(args, option) < 1:
            parser.error("--{} must be >= 1".format(option))
    # Before MXNet loads: its thread pools read these at import.
    thread_env.apply(args.threads)
    from harness.backends import mxnet as backend
    backend.configure(args.threads, "cpu", args.seed)
    cases = [measure(backend, name, batch, args.rounds, args.iterations,
                     args.warmup, args.seed)
             for name, batch in CASES
             if not args.network or name in args.network]
    report = {"framework": "mxnet",
              "framework_version": backend.versions("cpu")["framework_version"],
              "threads": args.threads,
              "effective_threads": backend.effective_threads(),
              "rounds": args.rounds, "iterations": args.iterations,
              "warmup": args.warmup, "cpu_model": provenance.cpu_model(),
              "cases": cases}
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print("\n".join(format_table(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
