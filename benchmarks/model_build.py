"""Each backend's model build, side by side: the part of a throughput cell
between the framework's import and its warm-up (the result's phases
`framework_imported` -> `model_built`), per framework and network, with its
ratio to PyTorch's.

Every measurement is a fresh process, as a cell is: it applies the cell's
thread variables and allocator settings, imports and configures the
backend, then times `prepare` (the model as harness.networks describes it,
the mini-batch and the training session), waits for what the framework left
running asynchronously, and settles the garbage collector as the cell does.
It reports that whole span ("build") and `build_model` alone ("model"). The
processes run in rounds; each round takes the frameworks in the opposite
order to the round before (ABBA), so a machine whose load drifts weighs on
every framework alike.

    .venv/bin/python benchmarks/model_build.py [--rounds 5] [--threads 1]
        [--framework pytorch ...] [--network fcn5 ...]
        [--image cntk=TAG --image caffe=TAG]

Native frameworks run in .venvs/<framework>-cpu; one given an --image runs
in that Docker image (CNTK and Caffe: the CPU images `invoke build` makes),
with this checkout mounted. Python 3.6 and the standard library, since the
worker half runs in those images.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NATIVE = ("pytorch", "tensorflow", "mxnet", "jax")
# A fully connected, a convolutional and a recurrent network, at the smoke
# suite's batch sizes.
CASES = (("fcn5", 16), ("resnet50", 2), ("lstm32", 8))
BASELINE = "pytorch"
# The goal: no backend's build more than this times PyTorch's.
GOAL = 1.5
MARK = "MODEL-BUILD "


# --- the worker: one build in a fresh process --------------------------------

def _synchronize(framework, session):
    """Wait for what the build left running (MXNet's prepare waits itself;
    PyTorch, TensorFlow's eager CPU ops, CNTK and Caffe are synchronous)."""
    if framework == "jax":
        import jax
        model = session.model
        jax.block_until_ready((model.params, model.state, session.inputs))


def worker(args):
    sys.path.insert(0, ROOT)
    from harness import allocator, collector, frameworks, networks, threads
    threads.apply(args.threads)
    allocator.hold()
    network = networks.get(args.network)
    backend = frameworks.load(args.framework)
    backend.configure(args.threads, "cpu", args.seed)
    spans = []
    build_model = backend.build_model

    def timed_build(*a, **kw):
        start = time.perf_counter()
        model = build_model(*a, **kw)
        # Their engines run asynchronously: the build is what they did.
        if args.framework == "jax":
            __import__("jax").block_until_ready(model.params)
        elif args.framework == "mxnet":
            __import__("mxnet").nd.waitall()
        spans.append(time.perf_counter() - start)
        return model

    # prepare calls build_model by its name in the backend's module.
    backend.build_model = timed_build
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start, cpu_start = time.perf_counter(), time.process_time()
    session = backend.prepare(network, args.batch_size, "cpu", args.seed)
    _synchronize(args.framework, session)
    collector.settle()
    total = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    # Page faults say how much fresh memory the build touched (4 KiB or 2 MiB
    # at a time): load on the machine changes the seconds, not them.
    print(MARK + json.dumps({
        "build_s": total, "model_s": spans[0],
        "cpu_s": time.process_time() - cpu_start,
        "faults": after.ru_minflt - usage.ru_minflt,
        "parameters": backend.count_parameters(session.model)}))
    sys.stdout.flush()


# --- the driver ---------------------------------------------------------------

def command(framework, root, network, batch_size, args):
    worker_args = ["benchmarks/model_build.py", "--worker",
                   "--framework", framework, "--network", network,
                   "--batch-size", str(batch_size),
                   "--threads", str(args.threads), "--seed", str(args.seed)]
    image = dict(args.image).get(framework)
    if image is None:
        python = os.path.join(root, ".venvs", framework + "-cpu", "bin",
                              "python")
        if not os.path.exists(python):
            sys.exit("no {} environment at {}: make it first (invoke env), "
                     "or give --image {}=TAG".format(framework, python,
                                                     framework))
        return [python] + worker_args
    return ["docker", "run", "--rm", "--network", "none",
            "-v", root + ":/dlrepro:ro", "-w", "/dlrepro",
            "-e", "PYTHONDONTWRITEBYTECODE=1", image, "python3"] + worker_args


def measure(side, network, batch_size, args):
    label, framework, root = side
    proc = subprocess.run(command(framework, root, network, batch_size, args),
                          cwd=root, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    sys.exit("{} {} failed (exit {}):\n{}".format(
        label, network, proc.returncode, proc.stderr[-3000:]))


def rounds(args, cases, sides):
    """{(label, network): [measurement, ...]}, printed as they come."""
    found = dict(((s[0], n), []) for s in sides for n, _ in cases)
    for index in range(args.rounds):
        order = sides if index % 2 == 0 else sides[::-1]
        for network, batch_size in cases:
            for side in order:
                m = measure(side, network, batch_size, args)
                found[(side[0], network)].append(m)
                print("round {} {:<19} {:<9} build {:6.3f} s  model {:6.3f} s"
                      "  cpu {:6.3f} s".format(
                          index + 1, side[0], network, m["build_s"],
                          m["model_s"], m["cpu_s"]))
                sys.stdout.flush()
    return found


def table(found, cases, frameworks, key):
    """Lines: per framework and network the median of `key` and its ratio
    to the baseline's median."""
    networks = [n for n, _ in cases]
    lines = ["| framework | " + " | ".join(networks) + " |",
             "|---" * (len(networks) + 1) + "|"]
    for framework in frameworks:
        cells = []
        for network in networks:
            median = statistics.median(m[key] for m in
                                       found[(framework, network)])
            base = found.get((BASELINE, network))
            ratio = ("" if not base else " ({:.2f}x)".format(
                median / statistics.median(m[key] for m in base)))
            unit = " s" if key.endswith("_s") else ""
            cells.append("{:.{}f}{}{}".format(median, 2 if unit else 0, unit,
                                              ratio))
        lines.append("| {} | {} |".format(framework, " | ".join(cells)))
    return lines


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--framework", action="append")
    parser.add_argument("--network", action="append")
    parser.add_argument("--image", action="append", default=[],
                        type=lambda s: tuple(s.split("=", 1)),
                        help="FRAMEWORK=TAG: run it in this Docker image")
    parser.add_argument("--compare", metavar="CHECKOUT",
                        help="also build every network with the harness of "
                             "this other checkout (its .venvs), labelled "
                             "'FRAMEWORK (other)', in the same rounds")
    parser.add_argument("--worker", action="store_true",
                        help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.threads < 1:
        parser.error("--rounds and --threads must be positive integers")
    if not args.worker:
        sys.path.insert(0, ROOT)
        from harness import frameworks, networks
        for name, valid in (("framework", frameworks.NAMES),
                            ("network", networks.NETWORKS)):
            for value in getattr(args, name) or ():
                if value not in valid:
                    parser.error("unknown {} {!r}; valid: {}".format(
                        name, value, ", ".join(sorted(valid))))
    return args


def main(argv=None):
    args = parse(argv)
    if args.worker:
        args.framework, args.network = args.framework[0], args.network[0]
        return worker(args)
    frameworks = args.framework or list(NATIVE)
    if BASELINE in frameworks:  # first, then last: the ABBA order
        frameworks = [BASELINE] + [f for f in frameworks if f != BASELINE]
    sides = [(f, f, ROOT) for f in frameworks]
    if args.compare:
        other = os.path.abspath(args.compare)
        sides += [(f + " (other)", f, other) for f in frameworks]
    sizes = dict(CASES)
    cases = [(n, sizes.get(n, 16)) for n in (args.network or sizes)]
    found = rounds(args, cases, sides)
    labels = [s[0] for s in sides]
    for title, key in (("prepare, synchronized, collector settled: wall",
                        "build_s"),
                       ("the same, process CPU time", "cpu_s"),
                       ("build_model alone: wall", "model_s"),
                       ("page faults (minor) in the build", "faults")):
        print("\n{} (median of {} fresh processes, {} thread(s); ratio to "
              "{}'s median)".format(title, args.rounds, args.threads,
                                    BASELINE))
        print("\n".join(table(found, cases, labels, key)))


if __name__ == "__main__":
    main()
