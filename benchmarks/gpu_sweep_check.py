#!/usr/bin/env python3
"""The prepared GPU check: the user's sweep path on a real GPU, in one
script that fits a short loan of one GPU machine (~8 minutes on one H200).

    python3 benchmarks/gpu_sweep_check.py --python python3 \\
        [--timm-benchmark PATH/TO/timm/benchmark.py] [--budget 480]

What it runs, in this order, each part only while the budget lasts (what
is skipped is said in the report):

1. the compatibility gate of every GPU profile of the matrix on each GPU
   NVML shows, and the profile `invoke bench` would choose per framework
   (dlrepro.bench.gpuprofile);
2. `invoke bench --suite paper-synthetic-gpu` subsets for PyTorch and JAX
   natively (fcn5 and resnet50 at batch 64, `--repeat 3`): under each
   isolation mode this dlrepro offers (`--isolation cell|group|fork` as
   `invoke bench` has them; one process per cell otherwise);
3. PyTorch ResNet-50 at batch 64 under precision x compile (fp32, tf32,
   bf16 x none, default);
4. the best of those against timm's own training benchmark (its
   benchmark.py, which the timm wheel does not install: give its path) on
   the same GPU, same model, batch and precision.

Clocks: observe only, always; this script never changes a GPU setting.
Everything lands under --out (default docs/measurements/<gpu>-<date>/):
gate.json, runs/ (the run folders), summary.json and report.txt.

`--device cpu --quick` runs the same path on a CPU (tests/runtimes/test_gpu_sweep_check.py
does, with the fake NVML standing in for a Hopper GPU).
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from harness import resultfile  # noqa: E402  (path fix)
from harness.gpu import compat  # noqa: E402  (path fix)
from dlrepro import hostinfo, matrix as matrix_mod  # noqa: E402
from dlrepro.bench import aggregate, gpuprofile  # noqa: E402
from dlrepro.run import store  # noqa: E402

NETWORKS = ("fcn5", "resnet50")
PRECISION_COMPILE = (("bf16", "default"), ("fp32", "none"), ("tf32", "none"),
                     ("bf16", "none"), ("fp32", "default"),
                     ("tf32", "default"))
# A part needs at least this long: a process start, an import, a warm-up.
MIN_PART_S = 30


class Budget(object):
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds

    def left(self):
        return self.deadline - time.monotonic()

    def allows(self):
        return self.left() >= MIN_PART_S


def invoke_path():
    local = os.path.join(ROOT, ".venv", "bin", "invoke")
    return local if os.path.exists(local) else "invoke"


def gate(m):
    """(per-GPU verdicts of every GPU profile, chosen profile per
    framework) on the GPUs NVML shows."""
    gpus = hostinfo.gpus()
    table = []
    for gpu in gpus:
        verdicts = {}
        for framework in matrix_mod.frameworks(m):
            for profile in gpuprofile.gpu_profiles(m, framework):
                check = compat.check(
                    gpu.get("compute_capability"), gpu.get("driver_version"),
                    gpuprofile.stack(m[framework][profile]))
                verdicts[f"{framework}/{profile}"] = {
                    "verdict": check["verdict"], "reason": check["reason"]}
        table.append({"gpu": gpuprofile.describe(gpu), "verdicts": verdicts})
    choices = {fw: gpuprofile.choose(m, fw, gpus).as_record()
               for fw in matrix_mod.frameworks(m)}
    return gpus, table, choices


def isolation_modes(invoke):
    """The isolation modes `invoke bench` offers ([None]: only one)."""
    proc = subprocess.run([invoke, "bench", "--help"], cwd=ROOT,
                          capture_output=True, text=True)
    if "--isolation" not in proc.stdout:
        return [None]
    # fork: a dlrepro whose help says its cells may be forked.
    return ["cell", "group"] + (["fork"] if "forked" in proc.stdout else [])


def bench(invoke, args, extra, budget, log):
    """One `invoke bench`; (run folder or None, wall seconds, exit)."""
    argv = [invoke, "bench", "--runtime", "native", "--python", args.python,
            "--clock-policy", "observe", "--out", os.path.join(args.out,
                                                                 "runs")]
    if args.device == "cpu":
        argv += ["--device", "cpu", "--threads", "1"]
    argv += extra
    log("$ " + " ".join(argv[1:]))
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                              timeout=max(budget.left(), MIN_PART_S))
    except subprocess.TimeoutExpired:
        return None, round(time.monotonic() - started, 1), "timeout"
    wall = round(time.monotonic() - started, 1)
    found = re.findall(r"^(\S+): \d+ \w+", proc.stdout, re.MULTILINE)
    run_dir = found[-1] if found and os.path.isdir(found[-1]) else None
    if run_dir is None:
        log("  " + (proc.stderr.strip().splitlines() or ["(no output)"])[-1])
    return run_dir, wall, proc.returncode


def cells_of(run_dir):
    """[{id, status, mean_s, ci95_s, samples_per_s, processes}] of a run."""
    _record, pairs = store.load_run(run_dir)
    stats = {aggregate.cell_key(s.cell): s for s in aggregate.run_stats(pairs)}
    rows = []
    for spec, members in aggregate.cells(pairs):
        found = stats.get(aggregate.cell_key(spec))
        rows.append({
            "id": members[0][0]["id"], "status": members[0][0]["status"],
            "processes": found.processes if found else 0,
            "mean_s": found.mean_s if found else None,
            "ci95_s": list(found.ci95_s) if found else None,
            "samples_per_s": found.samples_per_s if found else None,
            "message": members[0][0].get("message")})
    return rows


def sweeps(invoke, args, budget, log):
    parts = []
    iterations, warmup, batch = (("3", "1", "2") if args.quick
                                 else ("30", "5", "64"))
    for mode in isolation_modes(invoke):
        for framework in args.frameworks:
            if not budget.allows():
                parts.append({"framework": framework, "isolation": mode,
                              "skipped": "time budget spent"})
                continue
            extra = ["--framework", framework, "--suite",
                     "paper-synthetic-gpu", "--repeat", "3", "--batch-size",
                     batch, "--iterations", iterations, "--warmup", warmup]
            networks = NETWORKS[:1] if args.quick else NETWORKS
            extra += [a for n in networks for a in ("--network", n)]
            extra += ["--isolation", mode] if mode else []
            run_dir, wall, code = bench(invoke, args, extra, budget, log)
            parts.append({"framework": framework,
                          "isolation": mode or "cell (the only mode)",
                          "run": run_dir, "wall_s": wall, "exit": code,
                          "cells": cells_of(run_dir) if run_dir else []})
    return parts


def precision_compile(invoke, args, budget, log):
    rows = []
    iterations, warmup, batch = (("3", "1", "2") if args.quick
                                 else ("30", "10", "64"))
    pairs = PRECISION_COMPILE[:2] if args.quick else PRECISION_COMPILE
    for precision, compile_mode in pairs:
        if args.quick:
            compile_mode = "none"  # inductor's C++ build takes minutes on a CPU
        if not budget.allows():
            rows.append({"precision": precision, "compile": compile_mode,
                         "skipped": "time budget spent"})
            continue
        run_dir, wall, code = bench(invoke, args, [
            "--framework", "pytorch", "--suite", "paper-synthetic-gpu",
            "--network", "resnet50", "--batch-size", batch,
            "--iterations", iterations, "--warmup", warmup,
            "--precision", precision, "--compile", compile_mode], budget, log)
        cells = cells_of(run_dir) if run_dir else []
        rows.append({"precision": precision, "compile": compile_mode,
                     "run": run_dir, "wall_s": wall, "exit": code,
                     "cell": cells[0] if cells else None})
    return rows


def timm_training(args, best, budget, log):
    """timm's benchmark.py on the best mode's precision, same batch."""
    if not args.timm_benchmark:
        return {"skipped": "no --timm-benchmark given (timm's benchmark.py "
                           "is not in the timm wheel)"}
    if not budget.allows():
        return {"skipped": "time budget spent"}
    results = os.path.join(args.out, "timm-results.json")
    argv = [args.python, args.timm_benchmark, "--bench", "train",
            "--model", "resnet50", "--batch-size", "64",
            "--num-warm-iter", "10", "--num-bench-iter", "30",
            "--results-file", results]
    if best and best["precision"] in ("bf16", "fp16"):
        argv += ["--amp", "--amp-dtype",
                 "bfloat16" if best["precision"] == "bf16" else "float16"]
    if best and best["compile"] not in (None, "none"):
        argv += ["--torchcompile"]
    log("$ " + " ".join(argv))
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                          timeout=max(budget.left(), MIN_PART_S))
    if proc.returncode != 0 or not os.path.exists(results):
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    with open(results) as handle:
        found = json.load(handle)
    found = found[0] if isinstance(found, list) else found
    return {"argv": argv[1:], "samples_per_s": found.get(
        "train_samples_per_sec"), "raw": found}


def best_mode(rows):
    done = [r for r in rows if (r.get("cell") or {}).get("samples_per_s")]
    return max(done, key=lambda r: r["cell"]["samples_per_s"], default=None)


def report_lines(summary):
    lines = [f"GPU sweep check, {summary['date']}, device {summary['device']}"]
    for row in summary["gate"]:
        lines.append(f"gate on {row['gpu']}:")
        lines += [f"  {name:<22} {v['verdict']:<15} {v['reason']}"
                  for name, v in sorted(row["verdicts"].items())]
    lines.append("profiles chosen:")
    lines += gpuprofile.format_records(summary["choices"])
    for part in summary["sweeps"]:
        head = f"{part['framework']} sweep, isolation {part['isolation']}"
        if "skipped" in part:
            lines.append(f"{head}: skipped ({part['skipped']})")
            continue
        lines.append(f"{head}: wall {part['wall_s']} s, exit {part['exit']}")
        lines += [f"  {c['id']:<44} {c['status']:<11} procs {c['processes']}"
                  f"  mean {_ms(c['mean_s'])}" for c in part["cells"]]
    lines.append("resnet50 precision x compile (pytorch):")
    for row in summary["precision_compile"]:
        cell = row.get("cell") or {}
        lines.append(f"  {row['precision']:<5} {row['compile']:<8} "
                     + (row.get("skipped") or f"{cell.get('status')} mean "
                        f"{_ms(cell.get('mean_s'))}, "
                        f"{_rate(cell.get('samples_per_s'))} samples/s"))
    timm = summary["timm"]
    lines.append("timm's training benchmark: " + (
        timm.get("skipped") or timm.get("error") or
        f"{_rate(timm['samples_per_s'])} samples/s; dlrepro's best "
        f"{_rate(summary['best_samples_per_s'])} (ratio "
        f"{summary['ratio_to_timm']:.3f})"))
    lines.append(f"wall {summary['wall_s']} s of a {summary['budget_s']} s "
                 f"budget")
    return lines


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1000:.2f} ms"


def _rate(value):
    return "-" if value is None else f"{value:,.1f}"


def default_out(gpus):
    name = re.sub(r"[^a-z0-9]+", "-", (gpus[0].get("name") or "gpu").lower()
                  if gpus else "cpu").strip("-")
    name = name.replace("nvidia-", "")
    return os.path.join(ROOT, "docs", "measurements",
                        f"{name}-{datetime.date.today().isoformat()}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default="python3",
                        help="the interpreter with PyTorch and JAX")
    parser.add_argument("--frameworks", default="pytorch,jax")
    parser.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--quick", action="store_true",
                        help="tiny cells (a smoke test on a CPU)")
    parser.add_argument("--budget", type=float, default=480.0,
                        help="seconds for the whole check (default 480)")
    parser.add_argument("--timm-benchmark", help="timm's benchmark.py")
    parser.add_argument("--out", help="where everything lands")
    args = parser.parse_args(argv)
    args.frameworks = [f for f in args.frameworks.split(",") if f]
    started = time.monotonic()
    budget = Budget(args.budget)
    m = matrix_mod.load()
    gpus, table, choices = gate(m)
    args.out = os.path.abspath(args.out or default_out(gpus))
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    resultfile.write_atomic(os.path.join(args.out, "gate.json"),
                            {"gpus": gpus, "gate": table, "choices": choices})
    invoke = invoke_path()
    log = print
    parts = sweeps(invoke, args, budget, log)
    rows = precision_compile(invoke, args, budget, log)
    best = best_mode(rows)
    timm = timm_training(args, best, budget, log)
    best_rate = best["cell"]["samples_per_s"] if best else None
    summary = {
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": args.device, "gpus": gpus, "gate": table,
        "choices": choices, "sweeps": parts, "precision_compile": rows,
        "best_mode": best, "best_samples_per_s": best_rate, "timm": timm,
        "ratio_to_timm": (best_rate / timm["samples_per_s"]
                          if best_rate and timm.get("samples_per_s")
                          else None),
        "budget_s": args.budget,
        "wall_s": round(time.monotonic() - started, 1)}
    resultfile.write_atomic(os.path.join(args.out, "summary.json"), summary)
    lines = report_lines(summary)
    with open(os.path.join(args.out, "report.txt"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
