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


# --- data and convergence (issue 6) ----------------------------------------------
# Thin tasks over dlrepro.datasets and dlrepro.converge; see docs/convergence.md.

@task(auto_shortflags=False,
      help={"dataset": "mnist, cifar10 or ptb",
            "data_dir": "folder that holds <dataset>/ (default: data/)",
            "mirror": "base URL to download from instead of the official ones",
            "check": "only verify the files already there; download nothing"})
@user_errors
def data(c, dataset, data_dir=None, mirror=None, check=False):
    """Download a dataset's official files (verified), or check them."""
    from dlrepro import datasets
    folder = data_dir or datasets.DEFAULT_DATA_DIR
    if not check:
        datasets.download(dataset, folder, mirror=mirror,
                          progress=datasets.ProgressPrinter(
                              sys.stderr, sys.stderr.isatty()))
    lines = datasets.status(dataset, folder)
    print("\n".join(lines))
    if check and not lines[-1].startswith(f"{dataset}: {dataset} sha256:"):
        raise UserError(lines[-1])
