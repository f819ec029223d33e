"""The harness against a plain, idiomatic CNTK training loop (issue 4).

For fcn5 (batch 64), alexnet-r (batch 128) and resnet-56 (batch 16) on the
CPU: the harness's mean iteration time (harness.timing.run_loop over the
CNTK backend's Session.step) against the loop of CNTK's own tutorials
(Trainer.train_minibatch fed numpy arrays, the loss read back from
previous_minibatch_loss_average) on the same model, built by the same
translation. The two are measured alternately, in rounds, in one process.
Goal: ratios within 5%.

CNTK 2.7 needs Python 3.6, so this runs in the CNTK image, the repository
mounted read-only (the image tag is what `invoke build --framework cntk`
printed):

    docker run --rm --network none --cpuset-cpus 0,1 \\
        -v "$PWD":/opt/dlrepro:ro -e PYTHONPATH=/opt/dlrepro \\
        dlrepro/cntk:cpu-<hash> /opt/venv/bin/python \\
        /opt/dlrepro/benchmarks/idiomatic_cntk.py --threads 2

This is a measurement to report, not a test: timings on a shared machine
are noisy, which is why per-round ratios are shown next to the overall one.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import provenance, threads as thread_env  # noqa: E402
from harness import networks as nets, timing  # noqa: E402
from idiomatic_mxnet import CASES, GOAL, plain_loop  # noqa: E402


def idiomatic_step(backend, network, batch_size, seed):
    """The step of CNTK's tutorials on the same model: numpy arrays (labels
    one-hot, sparse) handed to train_minibatch every iteration. The same loss
    and optimizer as the harness and no error metric, so that both sides do
    the same arithmetic."""
    import cntk as C
    import numpy as np
    features, labels = backend.input_variables(network)
    model = backend.build_model(network, batch_size, features)
    loss = C.cross_entropy_with_softmax(model, labels)
    rate = C.learning_parameter_schedule(network.learning_rate,
                                         minibatch_size=batch_size)
    learner = C.momentum_sgd(model.parameters, rate,
                             C.momentum_schedule(network.momentum),
                             unit_gain=False) if network.momentum > 0 \
        else C.sgd(model.parameters, rate)
    trainer = C.Trainer(model, loss, [learner])
    from scipy import sparse  # CNTK's own dependency
    inputs, targets = backend._data(network, batch_size, seed + 1, None)
    # The backend declares its labels sparse, as CNTK's tutorials do.
    one_hot = sparse.csr_matrix(np.eye(network.classes,
                                       dtype=np.float32)[targets])
    feed = {features: np.ascontiguousarray(inputs), labels: one_hot}

    def step():
        trainer.train_minibatch(feed)
        return trainer.previous_minibatch_loss_average
    return step


def measure(backend, name, batch_size, rounds, iterations, warmup, seed):
    """Alternating rounds of the harness and the idiomatic loop: raw
    seconds per iteration of each, per-round ratios of the means, and
    process CPU seconds per iteration (all threads)."""
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
        order = ("harness", "idiomatic") if index % 2 == 0 else \
            ("idiomatic", "harness")
        for side in order:
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
    lines = ["CNTK {} on CPU, {} thread(s): harness vs the tutorials' "
             "train_minibatch loop ({} rounds x {} iterations each)".format(
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
                 "iteration (the harness's data is resident, the tutorial "
                 "loop hands numpy arrays over each step)")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int,
                        default=provenance.usable_cpus(),
                        help="threads for CNTK (default: usable CPUs)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--network", action="append",
                        choices=[name for name, _ in CASES])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for option in ("threads", "rounds", "iterations"):
        if getattr(args, option) < 1:
            parser.error("--{} must be >= 1".format(option))
    # Before CNTK loads: its MKL-ML and OpenMP read these at import.
    thread_env.apply(args.threads)
    from harness.backends import cntk as backend
    backend.configure(args.threads, "cpu", args.seed)
    cases = [measure(backend, name, batch, args.rounds, args.iterations,
                     args.warmup, args.seed)
             for name, batch in CASES
             if not args.network or name in args.network]
    report = {"framework": "cntk",
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
