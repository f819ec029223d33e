"""Invoke tasks: the user's entry points. Each task reads its flags, calls
the dlrepro package, and prints; UserError becomes a one-line message and
exit status 2."""
import functools
import sys

from invoke import Exit, task

from dlrepro.errors import UserError


def user_errors(fn):
    """Turn dlrepro's UserError into invoke's Exit (message, status 2)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2)
    return wrapper


@task(help={"framework": "framework whose native environment to make",
            "profile": "matrix profile (default: cpu)"})
@user_errors
def env(c, framework, profile="cpu"):
    """Create or refresh a framework's native virtual environment."""
    from dlrepro import envs, matrix
    m = matrix.load()
    entry = matrix.entry(m, framework, profile)
    reason = envs.unavailable_reason(entry, framework, profile)
    if reason:
        raise UserError(reason)
    print(envs.ensure(framework, profile, entry))


@task(help={"k": "only tests matching this pytest expression",
            "x": "stop at the first failure"})
def test(c, k="", x=False):
    """Run the test suite (pytest)."""
    args = [sys.executable, "-m", "pytest", "tests"]
    if k:
        args += ["-k", k]
    if x:
        args.append("-x")
    c.run(" ".join(args), pty=False)


# --- GPU clocks (issue 5) -----------------------------------------------------

@task(help={"state": "a clock-state file the harness wrote "
                     "(<cell>.clock-state.json next to the cell's result)",
            "run": "restore every outstanding clock-state file of this run: "
                   "an id, a folder, or latest (the default)",
            "out": "results root for --run (default: results)"})
@user_errors
def gpu_restore(c, state=None, run=None, out="results"):
    """Restore GPU clocks that a killed cell left changed (needs root)."""
    from dlrepro import gpu_restore as restore_mod
    for line in restore_mod.restore(state=state, run=run, out=out):
        print(line)
