"""What making the environments costs with pip (as before uv) and with uv,
side by side in one run, every mode with empty caches.

    .venv/bin/python benchmarks/env_creation.py [--frameworks pytorch,jax]
        [--rounds 1] [--before main] [--skip-setup] [--json FILE]

Per round, in alternating order (the first mode of one round is the last
of the next):
  setup.sh   `before`'s setup.sh and host lock (pip installs the lock)
             against this tree's (pip installs uv, uv the lock), each in a
             copy of what it needs, from a fresh .venv;
  envs       the framework environments (`cpu` profiles) made from the same
             locks: pip one after another, as `before` made them (`python
             -m venv`, `pip install --require-hashes --no-deps -r LOCK`);
             uv one after another; uv side by side (envs.ensure_all, what
             `invoke env` and `invoke bench --runtime native` do now).
Every mode gets its own empty PIP_CACHE_DIR and UV_CACHE_DIR, and what it
made is removed before the next. Measurement functions return seconds;
main() prints the figures and the ratios pip/uv.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dlrepro import matrix  # noqa: E402
from dlrepro.images import envs  # noqa: E402

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax")
ENV_MODES = ("pip", "uv serial", "uv side by side")


def _fresh_caches(scratch):
    """Point pip and uv at empty cache folders under `scratch`."""
    for variable, name in (("PIP_CACHE_DIR", "pip-cache"),
                           ("UV_CACHE_DIR", "uv-cache")):
        folder = scratch / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        os.environ[variable] = str(folder)


def _checked(command, **kwargs):
    proc = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        sys.exit(f"env_creation: {' '.join(map(str, command))} failed:\n"
                 f"{proc.stdout}{proc.stderr}")


def pip_env(framework, root):
    """One environment the way envs.py made it before uv."""
    lock = matrix.lock_path(framework, "cpu")
    target = envs.venv_dir(framework, "cpu", root)
    _checked([envs.python_for(matrix.load()[framework]["cpu"]["python"]),
              "-m", "venv", str(target)])
    _checked([str(target / "bin" / "python"), "-m", "pip", "install",
              "--quiet", "--disable-pip-version-check", "--no-deps",
              "--require-hashes", "-r", str(lock)])


def time_envs(mode, frameworks, scratch):
    """Seconds to make `frameworks`' environments in `mode`: in all, and
    per framework where they are made one after another."""
    root = scratch / "venvs"
    shutil.rmtree(root, ignore_errors=True)
    _fresh_caches(scratch)
    m = matrix.load()
    quiet = lambda _message: None  # noqa: E731
    each = {}
    start = time.perf_counter()
    if mode == "uv side by side":
        envs.ensure_all([(f, "cpu") for f in frameworks], m, quiet, root)
    for framework in frameworks if mode != "uv side by side" else ():
        began = time.perf_counter()
        if mode == "pip":
            pip_env(framework, root)
        else:
            envs.ensure(framework, "cpu", m[framework]["cpu"], quiet, root)
        each[framework] = time.perf_counter() - began
    seconds = time.perf_counter() - start
    shutil.rmtree(root, ignore_errors=True)
    return seconds, each


def _setup_tree(which, before, folder):
    """A copy of what setup.sh needs: `before`'s (git) or this tree's."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if which == "before":
        archive = subprocess.run(
            ["git", "archive", before, "setup.sh", "requirements", "dlrepro"],
            cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive,
                       check=True)
    else:
        for name in ("setup.sh", "requirements", "dlrepro"):
            copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
            copy(ROOT / name, folder / name)


def time_setup(which, before, scratch):
    """Seconds for setup.sh to make a fresh .venv (`which`: before|after)."""
    folder = scratch / f"setup-{which}"
    _setup_tree(which, before, folder)
    _fresh_caches(scratch)
    start = time.perf_counter()
    _checked(["bash", str(folder / "setup.sh")])
    seconds = time.perf_counter() - start
    shutil.rmtree(folder, ignore_errors=True)
    return seconds


def measure(frameworks, rounds, before, skip_setup, scratch, log):
    """{figure: [seconds per round]}."""
    times = {}
    for number in range(rounds):
        setups = ("before", "after")
        modes = ENV_MODES
        if number % 2:
            setups, modes = setups[::-1], modes[::-1]
        for which in () if skip_setup else setups:
            seconds = time_setup(which, before, scratch)
            times.setdefault(f"setup.sh {which}", []).append(seconds)
            log(f"round {number + 1}: setup.sh ({which}) {seconds:.1f} s")
        for mode in modes:
            seconds, each = time_envs(mode, frameworks, scratch)
            times.setdefault(f"envs {mode}", []).append(seconds)
            for framework, alone in each.items():
                times.setdefault(f"{framework} {mode}", []).append(alone)
            log(f"round {number + 1}: environments ({mode}) {seconds:.1f} s"
                + "".join(f"; {f} {t:.1f} s" for f, t in each.items()))
    return times


def summary_lines(times, frameworks):
    median = {k: statistics.median(v) for k, v in times.items()}
    lines = [f"{k:<22} {v:7.1f} s  (rounds: "
             f"{', '.join(f'{s:.1f}' for s in times[k])})"
             for k, v in median.items()]

    def ratio(a, b, what):
        if a in median and b in median:
            lines.append(f"{what:<40} {median[a] / median[b]:5.1f}x")
    ratio("setup.sh before", "setup.sh after", "setup.sh: pip / uv")
    ratio("envs pip", "envs uv serial",
          f"{len(frameworks)} environments: pip / uv serial")
    ratio("envs pip", "envs uv side by side",
          f"{len(frameworks)} environments: pip / uv side by side")
    for framework in frameworks:
        ratio(f"{framework} pip", f"{framework} uv serial",
              f"{framework}: pip / uv")
    if "setup.sh before" in median:
        total_before = median["setup.sh before"] + median["envs pip"]
        total_after = median["setup.sh after"] + median["envs uv side by side"]
        lines.append(f"{'setup.sh + environments: before / now':<40} "
                     f"{total_before / total_after:5.1f}x  "
                     f"({total_before:.1f} s against {total_after:.1f} s)")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", default="main",
                        help="git ref whose setup.sh is `before` (pip)")
    parser.add_argument("--skip-setup", action="store_true")
    parser.add_argument("--json", help="write the seconds here as well")
    args = parser.parse_args()
    frameworks = [f for f in args.frameworks.split(",") if f]
    unknown = sorted(set(frameworks) - set(FRAMEWORKS))
    if unknown or args.rounds < 1:
        sys.exit(f"env_creation: frameworks are {', '.join(FRAMEWORKS)} and "
                 f"--rounds at least 1 (got {', '.join(unknown) or args.rounds})")
    with tempfile.TemporaryDirectory(prefix="env-creation-") as scratch:
        times = measure(frameworks, args.rounds, args.before, args.skip_setup,
                        Path(scratch), log=print)
    print("\n".join(summary_lines(times, frameworks)))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"frameworks": frameworks, "seconds": times}, indent=2,
            sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
