"""A GPU image checked without a GPU: what it holds against what the matrix
and its labels say.

Each check runs in a throwaway container of the built image (no network,
no GPU, the repository's harness mounted read-only, as a cell runs):

- the framework imports, or says in one line why it cannot here;
- `python -m harness versions --device gpu` reports the matrix's versions;
- the CUDA runtime, cuDNN and NCCL found among the image's own files answer
  their version calls with the versions its labels give;
- the GPU architectures read from the framework's kernel library (its fat
  binaries' SASS and PTX entries, harness.gpu.fatbin) equal the matrix's `sass`
  and `ptx` (the newest PTX), on which the compatibility gate decides;
- a small CPU cell runs in it where the framework can run on a CPU.

A difference means the matrix (and with it the gate) is wrong: the report
says which field, what the matrix says and what the image holds.
"""
import json
import subprocess
import time

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.images import render

HARNESS = "/opt/dlrepro/harness"
MODULES = {"pytorch": "torch", "tensorflow": "tensorflow", "jax": "jax",
           "mxnet": "mxnet", "cntk": "cntk", "caffe": "caffe"}
PYTHON = "/opt/venv/bin/python"
# The package whose folder holds each framework's GPU kernels, and other
# places a framework keeps them (Ubuntu's Caffe is a system library).
KERNEL_SOURCES = {
    "pytorch": (["torch"], []),
    "tensorflow": (["tensorflow"], []),
    "jax": (["jaxlib", "jax_cuda12_plugin"], []),
    "mxnet": (["mxnet"], []),
    "cntk": (["cntk"], []),
    "caffe": ([], ["/usr/lib/x86_64-linux-gnu"]),
}
# CUDA's own libraries, wherever the image keeps them (nvidia-* wheels,
# the system's library folders, a framework's bundled copies).
FIND_LIBRARIES = r"""
import json, os, sys
sys.path.insert(0, "/opt/dlrepro")
from harness.gpu import cudalibs
found = []
for top in ("/opt", "/usr"):
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("share", "include", "src")]
        found.extend(os.path.join(folder, name) for name in sorted(files))
versions, sources = cudalibs.library_versions(paths=found)
# CUDA 10's cudaRuntimeGetVersion answers 35 (no driver) without a GPU:
# then the file name's version (libcudart.so.10.0), said as such.
for key, prefix, _symbol in cudalibs.LIBRARIES:
    path = cudalibs.find_loaded(prefix, found)
    suffix = path.split(".so.", 1)[-1] if path and ".so." in path else ""
    if versions[key] is None and suffix.count(".") >= 1:
        versions[key] = suffix
        sources[key] = "the file name " + path + " (" + sources[key] + ")"
print(json.dumps({"versions": versions, "sources": sources}))
"""
CPU_CELL = {"network": "fcn5", "dataset": "synthetic", "batch_size": 16,
            "global_batch_size": 16, "device": "cpu", "gpus": 0,
            "threads": 1, "iterations": 3, "warmup": 1, "runtime": "docker",
            "seed": 0, "clock_policy": "observe", "precision": "default",
            "compile": None}


def _docker(tag, argv, stdin=None, timeout=900):
    """(exit status, stdout, stderr) of `argv` in a throwaway container."""
    command = ["docker", "run", "--rm", "-i", "--network", "none",
               "--volume", f"{ROOT / 'harness'}:{HARNESS}:ro",
               "--env", "PYTHONPATH=/opt/dlrepro", tag] + argv
    proc = subprocess.run(command, input=stdin, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def _last_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _json(status, stdout, stderr):
    if status != 0:
        return None, _last_line(stderr or stdout)
    try:
        return json.loads(stdout), None
    except ValueError:
        return None, f"not JSON: {_last_line(stdout)}"


def same_version(expected, found):
    """Whether `found` ("12.8") is `expected` ("12.8.1") as far as either
    goes: a runtime reports major.minor, a matrix may pin the patch."""
    if not expected or not found:
        return False
    want, have = str(expected).split("."), str(found).split(".")
    common = min(len(want), len(have))
    return want[:common] == have[:common]


def _compare(field, expected, found):
    if isinstance(expected, list):
        agrees = expected == found
    elif not expected:  # the matrix says there is none (Caffe's cuDNN)
        agrees = found is None
    else:
        agrees = same_version(expected, found)
    return {"field": field, "matrix": expected, "image": found,
            "agrees": agrees}


def imports(tag, module):
    status, stdout, stderr = _docker(tag, [PYTHON, "-c", (
        f"import {module}; print(getattr({module}, '__version__', '?'))")])
    if status == 0:
        return {"ok": True, "version": _last_line(stdout), "why_not": None}
    return {"ok": False, "version": None, "why_not": _last_line(stderr)}


def kernels(tag, framework):
    modules, paths = KERNEL_SOURCES[framework]
    argv = [PYTHON, "-m", "harness", "kernels"] + \
        [a for m in modules for a in ("--module", m)] + paths
    report, problem = _json(*_docker(tag, argv))
    if report is None:
        return {"main": None, "sass": None, "ptx": None, "libraries": {},
                "why_not": problem}
    main = report["main"]
    found = report["libraries"].get(main) or {"sass": [], "ptx": []}
    return {"main": main, "sass": found["sass"], "ptx": found["ptx"],
            "sass_partial": found.get("sass_partial", []),
            "ptx_partial": found.get("ptx_partial", []),
            "libraries": report["libraries"],
            "why_not": None if main else "no library with GPU kernels found"}


def cpu_cell(tag, framework, profile):
    cell = dict(CPU_CELL, framework=framework, profile=profile)
    spec = json.dumps({"cell": cell, "container": None, "stack": None})
    started = time.monotonic()
    status, stdout, stderr = _docker(tag, ["sh", "-c", (
        f"{PYTHON} -m harness run --spec - --out /tmp/r.json >&2 && "
        f"cat /tmp/r.json")], stdin=spec)
    result, problem = _json(status, stdout, stderr)
    if result is None:
        return {"status": None, "why_not": problem, "mean_s": None}
    timing = result.get("timing") or {}
    return {"status": result["status"],
            "why_not": (result.get("error") or {}).get("message"),
            "mean_s": timing.get("mean_s"),
            "wall_s": round(time.monotonic() - started, 1)}


def check(framework, profile, tag, entry, labels, can_run_cpu=True):
    """The report of one built image (see the module's docstring)."""
    module = MODULES[framework]
    report = {"framework": framework, "profile": profile, "image": tag,
              "import": imports(tag, module)}
    versions, problem = _json(*_docker(tag, [
        PYTHON, "-m", "harness", "versions", "--framework", framework,
        "--device", "gpu"]))
    report["versions"] = versions or {"why_not": problem}
    libraries, problem = _json(*_docker(tag, [PYTHON, "-c",
                                              FIND_LIBRARIES]))
    report["libraries"] = libraries or {"versions": {}, "sources": {},
                                        "why_not": problem}
    report["kernels"] = kernels(tag, framework)
    report["cpu_cell"] = cpu_cell(tag, framework, profile) if can_run_cpu \
        else {"status": None, "why_not": "this framework build cannot run "
              "on a CPU", "mean_s": None}
    report["comparisons"] = comparisons(entry, labels, report)
    return report


def comparisons(entry, labels, report):
    """Each claim of the matrix and the labels against the image."""
    found = report["libraries"].get("versions") or {}
    said = report["versions"] if "why_not" not in report["versions"] else {}
    rows = []
    for key in ("cuda", "cudnn", "nccl"):
        label = labels.get(render.LABEL_PREFIX + key)
        rows.append(_compare(f"{key} (label vs library)", label,
                             found.get(key)))
        row = _compare(f"{key} (matrix vs harness versions)", entry[key],
                       said.get(key))
        if said.get(key) is None and entry[key]:
            # What a framework does not load without a GPU (TensorFlow's
            # NCCL) it cannot report; the library row above checks the file.
            row["agrees"] = None
            row["why_not"] = (said.get("version_sources") or {}).get(
                key, report["versions"].get("why_not") or "not reported")
        rows.append(row)
    sass = report["kernels"]["sass"]
    ptx = report["kernels"]["ptx"]
    rows.append(_compare("sass", sorted(entry["sass"], key=_arch_number),
                         sass))
    # The matrix names the newest PTX only: older PTX runs on no device
    # that the newest does not, except where machine code already runs.
    newest = max(ptx, key=_arch_number) if ptx else ""
    rows.append(_compare("ptx (newest)", [entry["ptx"]] if entry["ptx"]
                         else [], [newest] if newest else []))
    return rows


def _arch_number(text):
    return int(text.split("_", 1)[1].rstrip("af"))


def differences(report):
    return [row for row in report["comparisons"] if row["agrees"] is False]


def unreported(report):
    return [row for row in report["comparisons"] if row["agrees"] is None]


def gpu_targets(matrix, framework=None):
    """The (framework, profile) pairs of every GPU profile (of one
    framework)."""
    pairs = []
    for name in [framework] if framework else matrix_mod.frameworks(matrix):
        for profile in matrix_mod.profiles(matrix, name):
            if matrix_mod.entry(matrix, name, profile)["device"] == "gpu":
                pairs.append((name, profile))
    if not pairs:
        raise UserError(f"{framework} has no GPU profile")
    return pairs


def write_report(path, report):
    from harness.resultfile import write_atomic
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(str(path), report)


def summary_lines(report):
    """A few lines a person reads: what was found, what differs."""
    name = f"{report['framework']}/{report['profile']}"
    found = report["libraries"].get("versions") or {}
    kernels = report["kernels"]
    lines = [f"{name}: {report['image']}",
             "  import: " + ("ok " + str(report["import"]["version"])
                             if report["import"]["ok"]
                             else report["import"]["why_not"]),
             "  libraries: " + ", ".join(f"{k} {found.get(k) or '-'}"
                                         for k in ("cuda", "cudnn", "nccl")),
             f"  kernels ({kernels['main'] or kernels['why_not']}): sass "
             f"{','.join(kernels['sass'] or []) or '-'}; ptx "
             f"{','.join(kernels['ptx'] or []) or '-'}"
             + (f" (in a few sources only: "
                f"{','.join(kernels.get('sass_partial', []) + kernels.get('ptx_partial', []))})"
                if kernels.get("sass_partial") or kernels.get("ptx_partial")
                else ""),
             f"  cpu cell: {report['cpu_cell']['status'] or '-'}"
             + (f" ({report['cpu_cell']['why_not']})"
                if report["cpu_cell"]["why_not"] else "")]
    lines += [f"  not reported by harness versions: {row['field'].split()[0]}"
              f" ({row['why_not']})" for row in unreported(report)]
    wrong = differences(report)
    lines += [f"  DIFFERS {row['field']}: matrix {row['matrix']!r}, image "
              f"{row['image']!r}" for row in wrong] or \
        ["  agrees with the matrix and its labels"]
    return lines
