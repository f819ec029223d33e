"""One process per cell (`python -m harness run`, as sweeps run today)
against one worker for all of them (`python -m harness worker`), natively
with PyTorch on the smoke suite's cells, in alternating order (round 1:
cells then worker; round 2: worker then cells; ...), so that a machine's
load drifts over both alike.

Prints per round the sweep's wall time in each mode and their ratio
(worker/cells), and over all rounds the medians of each cell's fixed cost
(its wall time less its warm-up and timed iterations; in the worker, the
cells after the first, from its cell-start to its cell-done line) and of its
model build (the phases model_built - framework_imported), and the measured
fraction (warm-up and timed iterations over the sweep's wall time).

    .venv/bin/python docs/measurements/isolation-2026-12-02/worker_vs_cell.py \
        [--rounds 2] [--threads 2]
        [--python .venvs/pytorch-cpu/bin/python] [--out results/worker-vs-cell]
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

# This folder is docs/measurements/<topic>/ of the repository.
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from harness.resultfile import write_atomic  # noqa: E402

from dlrepro.bench import suites  # noqa: E402


def smoke_cells(threads):
    """The smoke suite's PyTorch CPU cells, as `invoke bench` plans them
    with --threads."""
    cells = []
    for group in suites.load("smoke")["groups"]:
        for network in group["networks"]:
            for batch in group["batch_sizes"]:
                cells.append({
                    "framework": "pytorch", "profile": "cpu",
                    "network": network, "dataset": "synthetic",
                    "batch_size": batch, "global_batch_size": batch,
                    "device": "cpu", "gpus": 0, "threads": threads,
                    "iterations": group["iterations"],
                    "warmup": group["warmup"], "runtime": "native",
                    "seed": 0, "clock_policy": group["clock_policy"],
                    "precision": group["precision"],
                    "compile": group["compile"]})
    return cells


def write_specs(folder, cells):
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, cell in enumerate(cells):
        path = folder / "{:02d}-{}.spec.json".format(index, cell["network"])
        write_atomic(str(path), {"cell": cell, "container": None})
        paths.append(path)
    return paths


def result_of(spec):
    return spec.with_name(spec.name[:-len(".spec.json")] + ".json")


def measured_s(result):
    phases = result["phases"]
    return phases["timed_done"] - phases["model_built"]


def build_s(result):
    phases = result["phases"]
    return phases["model_built"] - phases["framework_imported"]


def run_cells(python, specs, log):
    """One process per cell; [(wall of its process, result)], total wall."""
    walls = []
    started = time.perf_counter()
    for spec in specs:
        begun = time.perf_counter()
        subprocess.run([python, "-s", "-m", "harness", "run", "--spec",
                        str(spec), "--out", str(result_of(spec))],
                       cwd=str(ROOT), check=True, stdout=log, stderr=log)
        walls.append(time.perf_counter() - begun)
    total = time.perf_counter() - started
    return [(w, json.loads(result_of(s).read_text()))
            for w, s in zip(walls, specs)], total


def run_worker(python, specs, log):
    """One worker for all; [(its cell-start to cell-done, result)], total."""
    started = time.perf_counter()
    proc = subprocess.Popen([python, "-s", "-m", "harness", "worker"],
                            cwd=str(ROOT), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log,
                            universal_newlines=True)
    walls = []
    for spec in specs:
        proc.stdin.write(str(spec) + "\n")
        proc.stdin.flush()
        begun = None
        for line in proc.stdout:
            word = line.split(" ", 1)[0]
            if word == "cell-start":
                begun = time.perf_counter()
            elif word == "cell-done":
                break
            else:
                raise SystemExit("worker: " + line)
        walls.append(time.perf_counter() - begun)
    proc.stdin.close()
    if proc.wait() != 0:
        raise SystemExit("the worker exited {}".format(proc.returncode))
    total = time.perf_counter() - started
    return [(w, json.loads(result_of(s).read_text()))
            for w, s in zip(walls, specs)], total


def summary(mode, cells, total):
    for _, result in cells:
        if result["status"] != "ok":
            raise SystemExit("{} {}: {}".format(mode, result["cell"]["network"],
                                                result["error"]))
    later = cells[1:] if mode == "worker" else cells
    fixed = [w - measured_s(r) for w, r in later]
    return {"wall_s": total,
            "measured_fraction": sum(measured_s(r) for _, r in cells) / total,
            "fixed_s": fixed,
            "build_s": [build_s(r) for _, r in later],
            "first_fixed_s": cells[0][0] - measured_s(cells[0][1])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--python", default=str(
        ROOT / ".venvs" / "pytorch-cpu" / "bin" / "python"))
    parser.add_argument("--out", default=str(ROOT / "results" /
                                             "worker-vs-cell"))
    args = parser.parse_args()
    out = Path(args.out)
    cells = smoke_cells(args.threads)
    runs = {"cells": [], "worker": []}
    out.mkdir(parents=True, exist_ok=True)
    with open(str(out / "harness.log"), "a") as log:
        for index in range(args.rounds):
            order = ("cells", "worker") if index % 2 == 0 else \
                ("worker", "cells")
            for mode in order:
                specs = write_specs(out / "round{}-{}".format(index + 1, mode),
                                    cells)
                runner = run_cells if mode == "cells" else run_worker
                runs[mode].append(summary(mode, *runner(args.python, specs,
                                                        log)))
            print("round {} ({} first): cells {:.1f} s, worker {:.1f} s, "
                  "ratio worker/cells {:.3f}".format(
                      index + 1, order[0], runs["cells"][-1]["wall_s"],
                      runs["worker"][-1]["wall_s"],
                      runs["worker"][-1]["wall_s"] /
                      runs["cells"][-1]["wall_s"]))
    report(runs, len(cells))
    write_atomic(str(out / "worker-vs-cell.json"), runs)


def report(runs, count):
    print("{} PyTorch cells of the smoke suite, {} rounds".format(
        count, len(runs["cells"])))
    for mode, label in (("cells", "one process per cell"),
                        ("worker", "one worker, cells after the first")):
        fixed = [v for r in runs[mode] for v in r["fixed_s"]]
        build = [v for r in runs[mode] for v in r["build_s"]]
        print("  {:<36} fixed cost per cell median {:.2f} s (model build "
              "{:.2f} s; beyond it {:.2f} s); measured fraction {}".format(
                  label, statistics.median(fixed), statistics.median(build),
                  statistics.median(f - b for f, b in zip(fixed, build)),
                  " ".join("{:.2f}".format(r["measured_fraction"])
                           for r in runs[mode])))
    print("  the worker's first cell: fixed cost {}".format(" ".join(
        "{:.2f} s".format(r["first_fixed_s"]) for r in runs["worker"])))
    print("  wall ratio worker/cells per round: {}".format(" ".join(
        "{:.3f}".format(w["wall_s"] / c["wall_s"])
        for w, c in zip(runs["worker"], runs["cells"]))))


if __name__ == "__main__":
    main()
