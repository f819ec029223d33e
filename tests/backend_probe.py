"""Build networks with one framework's backend and report what it built.

Runs INSIDE a framework's environment, with the repository on PYTHONPATH:

    PYTHONPATH=. .venvs/tensorflow-cpu/bin/python tests/backend_probe.py \\
        --framework tensorflow --networks fcn-r,lstm:4 --steps 4 --out probe.json

For each network (an optional `:N` sets its batch size, else --batch, and
`:N:S` its steps too, else --steps), the
backend builds the model and the harness's fixed batch for that seed
(harness.data.batches.fixed_batch, the same values in every framework),
then takes its SGD steps. The JSON written maps each network to the framework's
parameter count, the per-sample output shape and the loss of every step
(the first is the loss at initialisation), or to the error that stopped it.
Generic: any framework in harness.frameworks.NAMES that imports will do.
"""
import argparse
import gc
import json
import sys
import time
import traceback

from harness import frameworks, networks, resultfile
from harness.data import batches
from harness.errors import Unsupported


def parse_networks(text, default_batch, default_steps):
    """"a,b:4,c:8:2" -> [("a", default_batch, default_steps),
    ("b", 4, default_steps), ("c", 8, 2)], names checked."""
    chosen = []
    for item in text.split(","):
        name, _, rest = item.strip().partition(":")
        size, _, steps = rest.partition(":")
        networks.get(name)
        batch = int(size) if size else default_batch
        count = int(steps) if steps else default_steps
        if batch < 1 or count < 1:
            raise ValueError("batch size and steps of {} must be >= 1".format(
                name))
        chosen.append((name, batch, count))
    return chosen


def probe(backend, name, batch_size, steps, seed):
    network = networks.get(name)
    started = time.time()
    batch = batches.fixed_batch(network, batch_size, seed)
    session = backend.prepare(network, batch_size, "cpu", seed, batch=batch)
    report = {"batch_size": batch_size,
              "parameters": int(session.parameters),
              "output_shape": [int(d) for d in session.output_shape()]}
    report["losses"] = [resultfile.finite_or_none(float(session.step()))
                        for _ in range(steps)]
    report["seconds"] = round(time.time() - started, 3)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", required=True,
                        choices=frameworks.NAMES)
    parser.add_argument("--networks", default=",".join(networks.NETWORKS),
                        help="comma-separated names, each optionally "
                             ":BATCH or :BATCH:STEPS")
    parser.add_argument("--batch", type=int, default=2,
                        help="batch size for networks without :BATCH")
    parser.add_argument("--steps", type=int, default=4,
                        help="steps for networks without :BATCH:STEPS")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default="-", help="JSON file, or - (stdout)")
    args = parser.parse_args(argv)
    chosen = parse_networks(args.networks, args.batch, args.steps)

    backend = frameworks.load(args.framework)
    backend.configure(args.threads, "cpu", args.seed)
    report = {"framework": args.framework, "seed": args.seed,
              "versions": backend.versions("cpu"),
              "networks": {}}
    for name, batch_size, steps in chosen:
        try:
            report["networks"][name] = probe(backend, name, batch_size,
                                             steps, args.seed)
        except Unsupported as exc:
            # What the backend declares it cannot build, with the reason.
            report["networks"][name] = {"unsupported": str(exc)}
        except Exception as exc:
            traceback.print_exc()
            report["networks"][name] = {"error": "{}: {}".format(
                type(exc).__name__, exc)}
        # One model at a time: fcn8 alone holds half a gigabyte of weights.
        gc.collect()
        sys.stderr.write("probe {} {}: {}\n".format(
            args.framework, name, next((k for k in ("error", "unsupported")
                                        if k in report["networks"][name]),
                                       "ok")))
    if args.out == "-":
        sys.stdout.write(resultfile.dumps(report))
    else:
        resultfile.write_atomic(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
