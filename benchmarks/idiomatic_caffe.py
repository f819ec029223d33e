"""The harness against Caffe's own timers: `caffe time` and a plain pycaffe
solver.step loop.

For each case on the CPU, three timings of the same network (the NetSpec
translation of the Caffe backend): the harness's mean iteration time
(harness.timing.run_loop over the backend's Session.step); a pycaffe loop
as Caffe's examples write it (an SGDSolver read from a solver prototxt that
names a net prototxt file, the batch copied into the input blobs once,
`solver.step(1)` timed in a plain loop, the loss not read back); and
`caffe time -model NET -iterations N`, the tool's own forward-backward
timer, in a subprocess with the same threads. Harness and pycaffe loop
alternate in one process (ABBA rounds, benchmarks/sidebyside.py); one
`caffe time` run follows each round. Goal: harness / pycaffe within 5%.
`caffe time` times forward and backward only, no SGD update (and on
all-zero inputs): harness / `caffe time` is above 1 by the update's share,
largest for the fully connected networks (one read-modify-write of every
weight and its momentum per iteration).

Runs in the Caffe image, the repository mounted read-only (the image tag
is what `invoke build --framework caffe` printed):

    docker run --rm --network none --cpuset-cpus 0,1 \\
        -v "$PWD":/opt/dlrepro:ro -e PYTHONPATH=/opt/dlrepro \\
        dlrepro/caffe:cpu-<hash> /opt/venv/bin/python \\
        /opt/dlrepro/benchmarks/idiomatic_caffe.py --threads 2 --all

This is a measurement to report, not a test: timings on a shared machine
are noisy, which is why per-round ratios are shown next to the overall one.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sidebyside  # noqa: E402
from harness import networks, provenance, threads as thread_env  # noqa: E402

# sidebyside's cases (fcn5 64, alexnet-r 128, resnet-56 16), and with --all
# every network at its smoke-suite batch (benchmarks/suites/smoke.toml).
ALL_CASES = (("fcn5", 16), ("fcn8", 16), ("alexnet", 4), ("resnet50", 2),
             ("lstm32", 8), ("lstm64", 8), ("lstm", 8), ("fcn-r", 16),
             ("alexnet-r", 16), ("resnet-56", 16))
AVERAGE = re.compile(r"Average Forward-Backward: ([0-9.eE+-]+) ms")


def _write(text, folder, name):
    path = os.path.join(folder, name)
    with open(path, "w") as out:
        out.write(text)
    return path


def idiomatic_step(backend, network, batch_size, seed, folder):
    """Caffe's examples' loop: net and solver prototxt files, SGDSolver,
    the batch set once, solver.step(1)."""
    import caffe
    net_path = _write(str(backend.net_parameter(network, batch_size)), folder,
                      "idiomatic-net.prototxt")
    solver_path = _write(
        'net: "{}"\nbase_lr: {}\nmomentum: {}\nlr_policy: "fixed"\n'
        'weight_decay: 0\nmax_iter: 2000000000\ndisplay: 0\n'
        'snapshot_after_train: false\nrandom_seed: {}\n'
        'solver_mode: CPU\ntype: "SGD"\n'.format(
            net_path, network.learning_rate, network.momentum, seed + 1),
        folder, "idiomatic-solver.prototxt")
    solver = caffe.SGDSolver(solver_path)
    inputs, labels = backend.batch_arrays(network, batch_size, "cpu", seed + 1)
    backend.feed(solver.net, network, inputs, labels)

    def step():
        solver.step(1)
    return step


def caffe_time(backend, network, batch_size, iterations, threads, folder):
    """Seconds per forward-backward pass by `caffe time` (a subprocess)."""
    path = _write(str(backend.net_parameter(network, batch_size)), folder,
                  "time-net.prototxt")
    env = dict(os.environ, GLOG_minloglevel="0", GLOG_logtostderr="1")
    thread_env.apply(threads, env)
    proc = subprocess.run(["caffe", "time", "-model", path, "-iterations",
                           str(iterations)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    found = AVERAGE.search(proc.stderr + proc.stdout)
    if proc.returncode != 0 or not found:
        raise RuntimeError("caffe time failed ({}): {}".format(
            proc.returncode, proc.stderr[-2000:]))
    return float(found.group(1)) / 1e3


def measure(backend, name, batch_size, rounds, iterations, warmup, seed,
            threads):
    with tempfile.TemporaryDirectory(prefix="dlrepro-caffe-time-") as folder:
        case = sidebyside.measure(
            backend,
            lambda b, n, s, sd: idiomatic_step(b, n, s, sd, folder),
            name, batch_size, rounds, iterations, warmup, seed)
        network = networks.get(name)
        case["caffe_time_s"] = [
            caffe_time(backend, network, batch_size, iterations, threads,
                       folder) for _ in range(rounds)]
    mean = sum(case["caffe_time_s"]) / len(case["caffe_time_s"])
    case["caffe_time_mean_s"] = mean
    case["ratio_caffe_time"] = case["harness_mean_s"] / mean
    return case


def table_lines(report):
    lines = ["Caffe {} on CPU, {} thread(s): harness vs a pycaffe "
             "solver.step loop ({} rounds x {} iterations each) and `caffe "
             "time` (forward-backward, no update)".format(
                 report["framework_version"], report["threads"],
                 report["rounds"], report["iterations"]),
             "{:<10} {:>5} {:>11} {:>11} {:>9} {:>7} {:>13} {:>9} {:>10}  {}"
             .format("network", "batch", "harness ms", "pycaffe ms",
                     "time ms", "h/py", "round h/py", "h/time",
                     "CPU h/py", "h/py within 5%")]
    for case in report["cases"]:
        lines.append(
            "{:<10} {:>5} {:>11.2f} {:>11.2f} {:>9.2f} {:>7.3f} {:>13} "
            "{:>9.3f} {:>10.3f}  {}".format(
                case["network"], case["batch_size"],
                case["harness_mean_s"] * 1e3, case["idiomatic_mean_s"] * 1e3,
                case["caffe_time_mean_s"] * 1e3, case["ratio"],
                "{:.2f}..{:.2f}".format(min(case["round_ratios"]),
                                        max(case["round_ratios"])),
                case["ratio_caffe_time"], case["cpu_ratio"],
                "yes" if abs(case["ratio"] - 1) <= sidebyside.GOAL else "no"))
    lines.append("h/py: harness mean / pycaffe loop mean; h/time: harness "
                 "mean / `caffe time` mean, which leaves out the SGD update; "
                 "CPU h/py: process CPU seconds per iteration, harness / "
                 "pycaffe loop (steadier than wall time on a loaded machine)")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int,
                        default=provenance.usable_cpus())
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--all", action="store_true",
                        help="every network at its smoke-suite batch size")
    parser.add_argument("--network", action="append",
                        help="only this network (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--table", metavar="JSON",
                        help="print the table of an earlier --json report "
                             "and stop")
    args = parser.parse_args(argv)
    if args.table:
        with open(args.table) as handle:
            print("\n".join(table_lines(json.load(handle))))
        return 0
    sidebyside.check_counts(parser, args)
    cases = ALL_CASES if args.all else sidebyside.CASES
    if args.network:
        unknown = sorted(set(args.network) - set(n for n, _ in cases))
        if unknown:
            parser.error("unknown network(s) {}".format(", ".join(unknown)))
        cases = [c for c in cases if c[0] in args.network]
    # Before Caffe loads: OpenBLAS reads its thread count at load.
    backend = sidebyside.load_backend("caffe", args.threads, args.seed)
    results = [measure(backend, name, batch, args.rounds, args.iterations,
                       args.warmup, args.seed, args.threads)
               for name, batch in cases]
    sidebyside.show(sidebyside.report_of("caffe", backend, args, results),
                    args.json, table_lines)
    return 0

if __name__ == "__main__":
    sys.exit(main())
