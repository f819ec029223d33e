"""What images cost: cold and no-op build times, image sizes, and the
overhead of running a cell in a container instead of natively.

    .venv/bin/python benchmarks/image_build.py [--frameworks pytorch,mxnet]
        [--rounds 6] [--skip-cold] [--skip-overhead] [--network fcn-r]
        [--batch-size 64] [--threads 1] [--iterations 50]
        [--base-image [FROM=]IMAGE ...] [--json FILE]

Cold builds use the existing wheelhouses (downloads are not timed) and no
layer cache, under a separate name prefix whose images are removed
afterwards; each image builds FROM the debootstrap stand-in of its base
(.ci/base-image.sh), or what --base-image says (as for `invoke build`).
The container-versus-native comparison runs the same PyTorch cell through
runtimes.native and runtimes.docker alternately, `--rounds` times each, in
this one process, and reports the ratio of mean (and median) iteration
times and each path's start-up cost (process wall time
minus the timed and warm-up iterations). The native process is pinned to
the same CPUs as the container (taskset), so both run under the same
constraint. Measurement functions return numbers; main() prints.
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dlrepro import matrix  # noqa: E402
from dlrepro.bench import plan as bench_plan  # noqa: E402
from dlrepro.images import build as images  # noqa: E402
from dlrepro.images import wheelhouse  # noqa: E402
from dlrepro.run import life  # noqa: E402
from dlrepro.run.runtimes import get  # noqa: E402
from dlrepro.run.runtimes.docker import cpuset  # noqa: E402
from harness import resultfile  # noqa: E402

BENCH_PREFIX = "dlrepro-docker-bench"
DEFAULT_BASES = ["python:3.11.9-slim-bookworm="
                 "dlrepro-docker-test/bookworm-python3:minbase",
                 "ubuntu:18.04=dlrepro-docker-test/bionic:minbase"]
CELL = {"framework": "pytorch", "profile": "cpu", "network": "fcn-r",
        "dataset": "synthetic", "batch_size": 64, "global_batch_size": 64,
        "device": "cpu", "gpus": 0, "threads": 1, "iterations": 50,
        "warmup": 5, "runtime": "docker", "seed": 0, "clock_policy": "observe"}


def measure_builds(frameworks, bases, client, cold=True):
    """{framework: {"cold_s", "noop_s", "size_bytes", "tag"}}; `bases` as
    `invoke build --base-image` takes them."""
    m = matrix.load()
    figures = {}
    for framework in frameworks:
        base_image = (images.base_for(m[framework]["cpu"], bases)
                      or m[framework]["cpu"]["base_image"])
        plan = images.plan(framework, "cpu", m, base_image=base_image,
                           client=client, name_prefix=BENCH_PREFIX)
        entry = {"tag": plan.tag, "base": plan.base}
        if wheelhouse.files(framework, "cpu", plan.entry) is None:
            wheelhouse.make(framework, "cpu", plan.entry)
        if cold:
            _remove(client, plan.tag)
            start = time.perf_counter()
            images.build(plan, client=client, nocache=True,
                         log=lambda _m: None)
            entry["cold_s"] = time.perf_counter() - start
        else:
            images.build(plan, client=client, log=lambda _m: None)
        # What `invoke build` does when nothing changed: plan (render, hash,
        # ask the engine for the base) and find the tag.
        start = time.perf_counter()
        tag = images.ensure(framework, "cpu", m, base_image=base_image,
                            client=client, name_prefix=BENCH_PREFIX,
                            log=lambda _m: None)
        entry["noop_s"] = time.perf_counter() - start
        assert tag == plan.tag
        entry["size_bytes"] = client.images.get(tag).attrs["Size"]
        figures[framework] = entry
    return figures


def measure_container_start(tag, repeats=5):
    """Median wall time of `docker run --rm --network none IMAGE true`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(["docker", "run", "--rm", "--network", "none", tag,
                        "true"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_cell(runtime, cell, run_dir, cell_id):
    """(wall seconds, result) of one cell, started as the pipeline starts
    it."""
    cell = dict(cell, runtime=runtime.name)
    job = bench_plan.job_for(cell, 3600)._replace(id=cell_id)
    spec = life.spec_file(job, runtime.describe(job.placement.target),
                          matrix.load())
    (run_dir / f"{cell_id}.spec.json").write_text(json.dumps(spec))
    launch = runtime.launch(job, run_dir)
    argv = launch.argv
    if runtime.name == "native":
        # The container gets --cpuset-cpus; pin the native process alike.
        argv = ["taskset", "-c", cpuset(cell["threads"])] + argv
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=launch.cwd, env=launch.env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
    finally:
        runtime.cleanup(job, run_dir)
    if proc.returncode != 0:
        raise RuntimeError(f"{runtime.name} cell failed: "
                           f"{proc.stdout}{proc.stderr}")
    result = resultfile.load(str(run_dir / f"{cell_id}.json"))
    if result["status"] != "ok":
        raise RuntimeError(f"{runtime.name} cell: {result['error']}")
    return wall, result


def measure_overhead(bases, rounds, cell=CELL):
    """Alternating native and docker runs of `cell`."""
    native = get("native")
    native.prepare([(cell["framework"], cell["profile"])], log=lambda _m: None)
    entry = matrix.load()[cell["framework"]][cell["profile"]]
    docker = get("docker", name_prefix=BENCH_PREFIX,
                 base_overrides={entry["base_image"]:
                                 images.base_for(entry, bases)
                                 or entry["base_image"]})
    reasons = docker.prepare([(cell["framework"], cell["profile"])],
                             log=lambda _m: None)
    if any(reasons.values()):
        raise RuntimeError(f"docker runtime not ready: {reasons}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        for round_ in range(rounds):
            for runtime in (native, docker):
                wall, result = run_cell(runtime, cell, run_dir,
                                        f"{runtime.name}-{round_}")
                timing = result["timing"]
                timed = sum(timing["per_iteration_s"]) + \
                    sum(timing["warmup_s"])
                cpus = result["environment"]["cpus_usable"]
                rows.append({"runtime": runtime.name, "round": round_,
                             "cpus_usable": cpus,
                             "mean_s": timing["mean_s"],
                             "median_s": timing["median_s"], "wall_s": wall,
                             "startup_s": wall - timed})
    return rows, docker.images[(cell["framework"], cell["profile"])]


def summarize_overhead(rows):
    by = {name: [r for r in rows if r["runtime"] == name]
          for name in ("native", "docker")}
    ratios = [d["mean_s"] / n["mean_s"]
              for n, d in zip(by["native"], by["docker"])]
    median_ratios = [d["median_s"] / n["median_s"]
                     for n, d in zip(by["native"], by["docker"])]
    return {
        "median_ratio_per_round": median_ratios,
        "median_ratio_median": statistics.median(median_ratios),
        "native_mean_s": statistics.median(r["mean_s"] for r in by["native"]),
        "docker_mean_s": statistics.median(r["mean_s"] for r in by["docker"]),
        "ratio_per_round": ratios,
        "ratio_median": statistics.median(ratios),
        "native_startup_s": statistics.median(r["startup_s"]
                                              for r in by["native"]),
        "docker_startup_s": statistics.median(r["startup_s"]
                                              for r in by["docker"]),
    }


def format_report(builds, bare_start_s, overhead, cell):
    lines = ["CPU images (debootstrap bases; wheelhouse present, not timed)",
             f"  {'framework':<11} {'cold build':>11} {'no-op':>8} {'size':>9}"
             f"  base"]
    for framework, f in builds.items():
        cold = f"{f['cold_s']:.1f} s" if "cold_s" in f else "-"
        lines.append(f"  {framework:<11} {cold:>11} {f['noop_s']:>6.2f} s "
                     f"{f['size_bytes'] / 1e9:>6.2f} GB  {f['base']}")
    lines.append(f"bare container start (docker run --rm IMAGE true): "
                 f"{bare_start_s:.2f} s")
    o = overhead
    if o is None:
        return lines
    lines += [
        f"cell {cell['framework']} {cell['network']} "
        f"batch {cell['batch_size']}, "
        f"{cell['threads']} threads, {cell['iterations']} iterations, "
        f"{len(o['ratio_per_round'])} alternating rounds, same CPUs pinned:",
        f"  mean iteration  native {o['native_mean_s'] * 1e3:.1f} ms   docker "
        f"{o['docker_mean_s'] * 1e3:.1f} ms   ratio docker/native "
        f"{o['ratio_median']:.3f} (per round: "
        + ", ".join(f"{r:.3f}" for r in o["ratio_per_round"]) + ")",
        f"  median iteration ratio docker/native "
        f"{o['median_ratio_median']:.3f} "
        f"(per round: " + ", ".join(f"{r:.3f}" for r in
                                    o["median_ratio_per_round"]) + ")",
        f"  start-up per cell (wall minus iterations)  native "
        f"{o['native_startup_s']:.2f} s   "
        f"docker {o['docker_startup_s']:.2f} s   "
        f"difference {o['docker_startup_s'] - o['native_startup_s']:+.2f} s",
    ]
    return lines


def _remove(client, tag):
    if images.local_image(client, tag) is not None:
        client.images.remove(tag, force=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="pytorch,tensorflow,mxnet")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--network", default=CELL["network"])
    parser.add_argument("--batch-size", type=int, default=CELL["batch_size"])
    parser.add_argument("--threads", type=int, default=CELL["threads"])
    parser.add_argument("--iterations", type=int, default=CELL["iterations"])
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true",
                        help="measure the images only, not the PyTorch cell "
                             "natively against its container")
    parser.add_argument("--base-image", action="append",
                        help="REF or MATRIX_BASE=REF (repeatable; default: "
                             + ", ".join(DEFAULT_BASES) + ")")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--keep", action="store_true",
                        help=f"keep the {BENCH_PREFIX}/* images")
    args = parser.parse_args(argv)
    client = images.engine()
    frameworks = [f for f in args.frameworks.split(",") if f]
    cell = dict(CELL, network=args.network, batch_size=args.batch_size,
                global_batch_size=args.batch_size, threads=args.threads,
                iterations=args.iterations)
    bases = args.base_image or DEFAULT_BASES
    rows = []
    try:
        builds = measure_builds(frameworks, bases, client,
                                cold=not args.skip_cold)
        bare = measure_container_start(next(iter(builds.values()))["tag"])
        if not args.skip_overhead:
            rows, _tag = measure_overhead(bases, args.rounds, cell)
    finally:
        if not args.keep:
            for image in client.images.list(name=f"{BENCH_PREFIX}/*"):
                for tag in image.tags:
                    _remove(client, tag)
    overhead = summarize_overhead(rows) if rows else None
    print("\n".join(format_report(builds, bare, overhead, cell)))
    if args.json:
        resultfile.write_atomic(args.json, {"builds": builds,
                                            "bare_container_start_s": bare,
                                            "overhead": overhead, "rows": rows,
                                            "cell": cell})
    return 0


if __name__ == "__main__":
    sys.exit(main())
