"""Convergence with data parallelism on generated data: loss curves as an
SVG plot (matplotlib, dlrepro.present.curves) and the convergence figures
(docs/convergence.md defines them).

Default: fcn-r (MNIST-format files) and alexnet-r (CIFAR-10-format files),
a few thousand generated samples, 3 epochs, 1 and 2 workers, in every
framework that has a data-parallel module here, on the CPU. The files are
generated in the exact official formats (dlrepro.converge.datasets.generate)
and read through the same verified readers as the real ones, against the
checksums of the generated files (the results say `-custom`).

    .venv/bin/python benchmarks/convergence_report.py            # run + report
    .venv/bin/python benchmarks/convergence_report.py --run DIR  # report only

Prints the figures and writes <run>/loss-curves.svg (and --svg PATH). On 2
CPU cores the workers share the cores: speedup and efficiency there test the
mechanism and mean little about scaling.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro.converge import datasets, plan, runner, summary  # noqa: E402
from dlrepro.present import curves, style  # noqa: E402
from dlrepro.errors import UserError  # noqa: E402
from dlrepro.run import progress, runtimes  # noqa: E402
from harness import frameworks  # noqa: E402
from harness.data import datasets as hd  # noqa: E402

NETWORKS = ("fcn-r", "alexnet-r")


def available_frameworks():
    """Frameworks with a data-parallel module and a backend in this tree."""
    here = ROOT / "harness"
    return [f for f in frameworks.NAMES if f != "cntk" and
            (here / "frameworks" / f / "parallel.py").exists() and
            (here / "frameworks" / f / "backend.py").exists()]


def run_benchmark(args, log=print):
    data_dir = Path(args.out) / "convergence-benchmark-data"
    jobs = []
    for network in NETWORKS:
        name = hd.for_network(network)
        checksums = datasets.generate(name, data_dir, args.train_samples,
                                      args.test_samples, seed=args.seed)
        jobs += plan.plan(args.framework, [network], [1, 2],
                          global_batch=args.global_batch_size,
                          epochs=args.epochs, seed=args.seed,
                          threads=args.threads, data_dir=data_dir,
                          checksums=checksums, runtime="native",
                          timeout=args.timeout)
    plan.check_data(jobs, log=log)
    with progress.events() as events:
        run_dir, _ = runner.run(jobs, args.out, runtimes.get("native"),
                                command=" ".join(
                                    ["benchmarks/convergence_report.py"]
                                    + sys.argv[1:]), events=events)
    return run_dir


def report(run_dir, svg_paths):
    _record, results = runner.load_run(run_dir)
    figures = summary.summarise(results)
    for line in summary.table_lines(figures):
        print(line)
    if not curves.trained(results):
        print("no run produced a loss curve: no plot")
        return figures
    svg = style.svg(curves.figure(
        results, "Training loss, 1 worker (solid) vs 2 workers (dashed), "
        "global batch fixed"))
    for path in svg_paths:
        Path(path).write_text(svg)
        print(f"plot: {path}")
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="report this convergence run folder "
                        "instead of running")
    parser.add_argument("--framework", action="append",
                        help="framework (repeatable; default: all available)")
    parser.add_argument("--train-samples", type=int, default=3000)
    parser.add_argument("--test-samples", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global-batch-size", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--out", default=str(ROOT / "results"))
    parser.add_argument("--svg", help="also write the plot here")
    args = parser.parse_args(argv)
    try:
        if args.run:
            run_dir = Path(args.run)
        else:
            args.framework = args.framework or available_frameworks()
            run_dir = run_benchmark(args)
        report(run_dir, [run_dir / "loss-curves.svg"] +
               ([args.svg] if args.svg else []))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"results: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
