#!/usr/bin/env python3
"""GPU device check: the harness natively with PyTorch on a real GPU.

Run it on a machine with an NVIDIA GPU, PyTorch and nvidia-ml-py, from the
repository root, with that machine's own Python (no Docker, no venv):

    python3 benchmarks/gpu_check.py              # ~3-6 minutes on one H200
    OUT=/some/folder python3 benchmarks/gpu_check.py
    python3 benchmarks/gpu_check.py --device cpu --quick  # smoke, no GPU

It runs fcn5, alexnet and resnet50 at two batch sizes each, and gpt-small
(GPT-2 small, context 1024) at batch 8 in bf16 in PyTorch and in JAX
(--jax-python: a Python with JAX and its CUDA plugin), through
`python -m harness run` (one process per cell), then PyTorch's cells once
more as children of one fork server (`python -m harness worker --fork`, as
`--isolation fork` runs them), and prints iteration times, each fork
child's time from its fork to its first iteration against a process's, the telemetry of each timed window, the compatibility
gate's verdict for every GPU profile of dockerfiles/matrix.toml (and for the
PyTorch it runs) against this GPU, and MFU. Everything lands in
$OUT/summary.json and $OUT/report.txt (or under --out); the report's text
is benchmarks/gpu_check_report.py.

It NEVER changes GPU settings: the clock policy is `observe` unless
--clock-policy is given together with --i-own-this-gpu (for a machine that
is yours to change; the harness restores what it changes).

Without a GPU (or without CUDA in PyTorch) it says so and runs the same
cells on the CPU, so that it can be smoke-tested anywhere.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from harness import resultfile, workerlines  # noqa: E402  (path fix)
from harness.gpu import compat  # noqa: E402  (path fix)
from harness.gpu import clocks  # noqa: E402
from harness.errors import HarnessError  # noqa: E402
from dlrepro.run import gpu_restore  # noqa: E402  (stdlib-only on this path)
from harness.gpu.nvml import Nvml, device_info, system_versions  # noqa: E402
from gpu_check_report import format_forked, report_lines  # noqa: E402

NETWORKS = ("fcn5", "alexnet", "resnet50", "gpt-small")
# Two of the paper's GPU batch sizes per network; gpt-small at modern-gpu's
# smallest batch.
GPU_BATCHES = {"fcn5": (512, 4096), "alexnet": (64, 128),
               "resnet50": (32, 64), "gpt-small": (8,)}
CPU_BATCHES = {"fcn5": (16, 64), "alexnet": (2, 4), "resnet50": (2, 4),
               "gpt-small": (1,)}
QUICK_BATCHES = {"fcn5": (2, 4), "alexnet": (1, 2), "resnet50": (1, 2),
                 "gpt-small": (1,)}
# (framework, precision) of each network's cells: PyTorch as shipped for
# the paper's networks; the transformer in bf16, the precision it trains
# in today, in PyTorch and JAX (each with its fused attention).
VARIANTS = {"gpt-small": (("pytorch", "bf16"), ("jax", "bf16"))}
PLAIN = (("pytorch", "default"),)
# On the CPU (no GPU, or a smoke test) gpt-small runs over 64 tokens: its
# weights in full, its iterations seconds rather than minutes.
CPU_NETWORK = {"gpt-small": "gpt-small@64"}
# A cell needs a process start, the framework's import and its warm-up.
MIN_CELL_S = 20

TORCH_PROBE = r"""
import json, torch
info = {"version": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "arch_list": [],
        "devices": []}
if info["cuda_available"]:
    info["arch_list"] = torch.cuda.get_arch_list()
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        info["devices"].append({"name": p.name,
                                "capability": "{}.{}".format(p.major, p.minor),
                                "memory": p.total_memory})
print(json.dumps(info))
"""


# --- measurement -------------------------------------------------------------

def gpu_inventory():
    """NVML's view of this machine's GPUs ([], reason) when there is none."""
    nvml, reason = Nvml.open()
    if nvml is None:
        return [], reason
    try:
        driver, cuda = system_versions(nvml)
        count, error = nvml.try_call("nvmlDeviceGetCount")
        if error:
            return [], "nvmlDeviceGetCount: " + error
        return [device_info(nvml, i, driver, cuda)[1]
                for i in range(count)], None
    finally:
        nvml.close()


def torch_info(python):
    proc = subprocess.run([python, "-c", TORCH_PROBE], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=300)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["(no output)"]
        return None, lines[-1]
    return json.loads(proc.stdout.strip().splitlines()[-1]), None


def torch_stack(info):
    """The running PyTorch as a `stack` for the gate, from its arch list
    (entries the gate cannot read are left out rather than failing every
    cell's spec)."""
    sass, ptx = [], []
    for text in (info or {}).get("arch_list") or []:
        try:
            arch = compat.parse_arch(text)
        except HarnessError:
            continue
        (sass if arch.kind == "sm" else ptx).append(text)
    return {"sass": sass, "ptx": ptx, "min_driver": "",
            "cuda": (info or {}).get("cuda") or "",
            "framework_version": (info or {}).get("version")}


def matrix_stacks(path):
    """{"framework/profile": stack} of the matrix's GPU profiles, or a
    reason."""
    try:
        import tomllib  # Python 3.11+; the harness itself never needs it
    except ImportError:
        return {}, "Python {} has no tomllib (3.11+)".format(
            sys.version.split()[0])
    try:
        with open(path, "rb") as f:
            matrix = tomllib.load(f)
    except (OSError, ValueError) as exc:
        return {}, "cannot read {}: {}".format(path, exc)
    stacks = {}
    for framework in sorted(matrix):
        for profile, entry in matrix[framework].items():
            if entry.get("device") == "gpu":
                stacks["{}/{}".format(framework, profile)] = {
                    key: entry.get(key, "") for key in
                    ("sass", "ptx", "min_driver", "cuda", "framework_version")}
    return stacks, None if stacks else "the matrix has no GPU profiles yet"


def verdicts(gpu, stacks):
    table = {}
    for name, stack in stacks.items():
        try:
            table[name] = compat.check(gpu.get("compute_capability"),
                                       gpu.get("driver_version"), stack)
        except HarnessError as exc:
            table[name] = {"verdict": "invalid", "warnings": [],
                           "reason": "the matrix entry: {}".format(exc)}
    return table


def run_harness(argv, env, timeout):
    """Run one harness process; at the timeout SIGTERM it (it restores GPU
    clocks and writes a partial result), SIGKILL only if it does not stop.
    Returns (output, exit status or "timeout")."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT,
                                universal_newlines=True)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = "timeout"
        log.seek(0)
        return log.read(), rc


def cell_plan(device, networks, batches):
    """[(id, network as run, batch, framework, precision)] in run order."""
    plan = []
    for network in networks:
        name = network if device == "gpu" else CPU_NETWORK.get(network,
                                                               network)
        for batch in batches[network]:
            for framework, precision in VARIANTS.get(network, PLAIN):
                cell_id = "{}-b{}".format(network, batch)
                if (framework, precision) != PLAIN[0]:
                    cell_id = "{}-{}-{}-b{}".format(network, framework,
                                                    precision, batch)
                plan.append((cell_id, name, batch, framework, precision))
    return plan


def run_cells(python, device, networks, batches, iterations, warmup, policy,
              folder, timeout, stack, log, deadline=None, jax_python=None):
    """One harness process per cell (JAX's in `jax_python`, by default
    `python`). A cell that would start with less than MIN_CELL_S left
    before `deadline` (time.monotonic()) is skipped; a running one is
    stopped at the deadline."""
    # Why this is long: one loop that writes each cell's spec, runs it
    # within the budget, restores the clocks and keeps what it left.
    env = harness_env()
    results = []
    for cell_id, network, batch, framework, precision in cell_plan(
            device, networks, batches):
        spec = {"cell": {
            "framework": framework, "profile": "native",
            "network": network, "dataset": "synthetic",
            "batch_size": batch, "global_batch_size": batch,
            "device": device, "gpus": 1 if device == "gpu" else 0,
            "threads": None, "iterations": iterations, "warmup": warmup,
            "runtime": "native", "seed": 0, "clock_policy": policy,
            "precision": precision, "compile": None},
            "container": None,
            "clock_state": cell_id + ".clock-state.json"}
        # The stack gated is PyTorch's: JAX brings its own CUDA.
        if device == "gpu" and stack is not None and \
                framework == "pytorch":
            spec["stack"] = stack
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < MIN_CELL_S:
            log("skipping {} (batch {}): time budget spent".format(
                network, batch))
            results.append({"id": cell_id, "network": network,
                            "batch": batch, "exit": "skipped",
                            "wall_s": 0.0, "result": None,
                            "log_tail": ["skipped: the time budget was "
                                         "spent"]})
            continue
        spec_path = os.path.join(folder, cell_id + ".spec.json")
        out_path = os.path.join(folder, cell_id + ".json")
        resultfile.write_atomic(spec_path, spec)
        log("running {} ({}, batch {}) ...".format(cell_id, network, batch))
        started = time.monotonic()
        output, rc = run_harness(
            [(jax_python or python) if framework == "jax" else python,
             "-m", "harness", "run", "--spec", spec_path, "--out",
             out_path], env,
            timeout if left is None else min(timeout, left))
        wall = time.monotonic() - started
        results.append({"id": cell_id, "network": network,
                        "batch": batch, "exit": rc, "wall_s": wall,
                        "result": cell_result(out_path, cell_id, log),
                        "log_tail": output.strip().splitlines()[-15:]})
    return results


def harness_env():
    """The environment of a harness process: the repository's harness
    first on the path, what the caller had after it."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def cell_result(out_path, cell_id, log):
    """The result a cell left at `out_path`, or None, once its clocks are
    checked: the harness restores what a clock policy changed; this
    catches a cell that could not (killed), as the sweep does."""
    leftover = gpu_restore.after_cell(out_path, cell_id + ".clock-state.json")
    if leftover:
        log(leftover)
    if not os.path.exists(out_path):
        return None
    with open(out_path) as handle:
        return json.load(handle)


def run_forked(python, cells, folder, timeout, log, deadline=None):
    """PyTorch's ok cells once more, each a child of one fork server that
    imported PyTorch and never touched the GPU: what `--isolation fork`
    runs. [{id, exit, wall_s, result}]; the results in folder/fork. Each
    child makes a CUDA context of its own, which a group's later cell does
    not: the cost the fork projection had to assume."""
    chosen = [c for c in cells if (c["result"] or {}).get("status") == "ok"
              and c["result"]["cell"]["framework"] == "pytorch"]
    left = None if deadline is None else deadline - time.monotonic()
    if not chosen or (left is not None and left < MIN_CELL_S):
        return []
    fork_dir = os.path.join(folder, "fork")
    os.makedirs(fork_dir, exist_ok=True)
    lines = []
    for cell in chosen:
        with open(os.path.join(folder, cell["id"] + ".spec.json")) as handle:
            spec = json.load(handle)  # its clock state: beside its result
        path = os.path.join(fork_dir, cell["id"] + ".spec.json")
        resultfile.write_atomic(path, spec)
        lines.append(workerlines.command_line(path))
    log("running {} PyTorch cells through a fork server ...".format(
        len(chosen)))
    env = harness_env()
    started = time.monotonic()
    limit = timeout * len(chosen)
    with tempfile.TemporaryFile("w+") as output:
        server = subprocess.Popen(
            [python, "-m", "harness", "worker", "--fork"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT,
            universal_newlines=True)
        server.stdin.write("".join(lines))
        server.stdin.close()
        try:
            rc = server.wait(limit if left is None else min(limit, left))
        except subprocess.TimeoutExpired:
            server.terminate()  # its child ends the cell and writes it
            server.wait()
            rc = "timeout"
        output.seek(0)
        tail = output.read().strip().splitlines()[-15:]
    wall = time.monotonic() - started
    return [{"id": cell["id"], "exit": rc, "wall_s": wall,
             "result": cell_result(os.path.join(fork_dir, cell["id"] +
                                                ".json"), cell["id"], log),
             "log_tail": tail} for cell in chosen]


# --- entry point -------------------------------------------------------------

def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Run the harness natively with PyTorch on this machine's "
                    "GPU (observe-only clocks) and report.")
    parser.add_argument("--device", choices=("auto", "gpu", "cpu"),
                        default="auto",
                        help="gpu, cpu, or auto: gpu when NVML and PyTorch "
                             "both see one (default)")
    parser.add_argument("--python", default=sys.executable,
                        help="the Python with PyTorch (default: this one)")
    parser.add_argument("--jax-python", default=None,
                        help="the Python with JAX (and jax-cuda*-plugin on "
                             "a GPU) for gpt-small's JAX cell (default: "
                             "--python)")
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--networks", default=",".join(NETWORKS),
                        help="comma-separated subset of " +
                        ", ".join(NETWORKS))
    parser.add_argument("--matrix", default=os.path.join(
        ROOT, "dockerfiles", "matrix.toml"),
        help="the version matrix whose GPU profiles the gate checks")
    parser.add_argument("--quick", action="store_true",
                        help="tiny batches and 3 iterations (smoke test)")
    parser.add_argument("--timeout", type=int, default=150,
                        help="seconds per cell (default 150)")
    parser.add_argument("--budget", type=int, default=420,
                        help="seconds for all cells together; later cells "
                             "are skipped once it is spent (default 420)")
    parser.add_argument("--out", default=None,
                        help="output folder (default: $OUT, else "
                             "results/gpu-check-<time>)")
    parser.add_argument("--clock-policy", default="observe",
                        help="observe (default); anything else also needs "
                             "--i-own-this-gpu")
    parser.add_argument("--i-own-this-gpu", action="store_true",
                        help="allow a clock policy that changes this "
                             "machine's GPU settings")
    args = parser.parse_args(argv)
    try:
        clocks.parse_policy(args.clock_policy)
    except HarnessError as exc:
        parser.error(str(exc))
    if args.clock_policy != "observe" and not args.i_own_this_gpu:
        parser.error("--clock-policy {} changes GPU settings; this check runs "
                     "observe-only unless --i-own-this-gpu is given".format(
                         args.clock_policy))
    for name in ("iterations", "timeout", "budget"):
        if getattr(args, name) < 1:
            parser.error("--{} must be a positive integer".format(name))
    if args.warmup < 0:
        parser.error("--warmup must be >= 0")
    args.networks = [n for n in args.networks.split(",") if n]
    unknown = sorted(set(args.networks) - set(NETWORKS))
    if unknown or not args.networks:
        parser.error("--networks takes some of {}, got {}".format(
            ", ".join(NETWORKS), ", ".join(unknown) or "none"))
    return args


def choose_device(args, gpus, nvml_reason, torch):
    """(device, notes), or (None, why) when --device gpu cannot be had."""
    usable = bool(gpus and torch and torch["cuda_available"])
    missing = ("NVML sees no GPU ({})".format(nvml_reason) if not gpus
               else "PyTorch sees no CUDA device")
    if args.device == "gpu" and not usable:
        return None, missing
    device, notes = args.device, []
    if device == "auto":
        device = "gpu" if usable else "cpu"
        if device == "cpu":
            notes.append("no usable GPU ({}): the cells run on the CPU as a "
                         "smoke test; clocks, telemetry, gate and MFU need "
                         "a GPU".format(nvml_reason if not gpus else
                                        "PyTorch sees no CUDA device"))
    if torch is None:
        notes.append("PyTorch is not importable with {}: cells will fail"
                     .format(args.python))
    return device, notes


def output_folders(args):
    """(the report's folder, the per-cell files' folder), both made."""
    out = args.out or os.environ.get("OUT") or os.path.join(
        ROOT, "results", "gpu-check-" +
        datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y%m%dT%H%M%SZ"))
    os.makedirs(out, exist_ok=True)
    # $OUT brings back only a few files: keep the per-cell files apart.
    cells_dir = tempfile.mkdtemp(prefix="gpu-check-cells-") \
        if os.environ.get("OUT") and not args.out \
        else os.path.join(out, "cells")
    os.makedirs(cells_dir, exist_ok=True)
    return out, cells_dir


def gate_tables(gpus, torch, stacks):
    """{"GPU <index> <name>": verdicts} for the matrix's stacks and for the
    PyTorch that runs the cells."""
    gate = {}
    for gpu in gpus:
        table = verdicts(gpu, stacks)
        if torch and torch["arch_list"]:
            table["this python: torch " + torch["version"]] = compat.check(
                gpu["compute_capability"], gpu["driver_version"],
                torch_stack(torch))
        gate["GPU {} {}".format(gpu["index"], gpu["name"])] = table
    return gate


def main(argv=None):
    args = parse_args(argv)
    started = time.monotonic()

    def log(line):
        sys.stderr.write("[{:5.0f} s] {}\n".format(time.monotonic() - started,
                                                  line))

    gpus, nvml_reason = gpu_inventory()
    torch, torch_error = torch_info(args.python)
    device, notes = choose_device(args, gpus, nvml_reason, torch)
    if device is None:
        sys.stderr.write("gpu_check: --device gpu, but {}; use --device cpu "
                         "for a smoke test\n".format(notes))
        return 2
    out, cells_dir = output_folders(args)
    batches = QUICK_BATCHES if args.quick else (
        GPU_BATCHES if device == "gpu" else CPU_BATCHES)
    iterations, warmup = ((3, 1) if args.quick else
                          (args.iterations, args.warmup))
    stack = torch_stack(torch) if device == "gpu" else None
    stacks, matrix_reason = matrix_stacks(args.matrix)
    gate = gate_tables(gpus, torch, stacks)

    log("{} cells on {} ({} iterations, {} warm-up), clock policy {}".format(
        len(cell_plan(device, args.networks, batches)), device, iterations,
        warmup, args.clock_policy))
    deadline = time.monotonic() + args.budget
    cells = run_cells(args.python, device, args.networks, batches, iterations,
                      warmup, args.clock_policy, cells_dir, args.timeout,
                      stack, log, deadline=deadline,
                      jax_python=args.jax_python)
    forked = run_forked(args.python, cells, cells_dir, args.timeout, log,
                        deadline=deadline)

    lines = report_lines((gpus, nvml_reason, torch, torch_error), device,
                         notes, stacks, matrix_reason, gate, cells)
    lines.extend(format_forked(cells, forked))
    lines.append("== done in {:.0f} s; results in {}".format(
        time.monotonic() - started, out))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(out, "report.txt"), "w") as handle:
        handle.write(text)
    resultfile.write_atomic(os.path.join(out, "summary.json"), {
        "device": device, "notes": notes, "gpus": gpus,
        "nvml": nvml_reason, "torch": torch, "torch_error": torch_error,
        "clock_policy": args.clock_policy, "gate": gate,
        "matrix_gpu_profiles": sorted(stacks), "cells": cells,
        "forked": forked, "wall_s": time.monotonic() - started})
    failed = [c for c in cells + forked
              if (c["result"] or {}).get("status") != "ok"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
