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


@task(iterable=["framework", "network"], auto_shortflags=False,
      help={"framework": "framework to train (repeatable)",
            "network": "fcn-r, alexnet-r, resnet-56 or lstm (repeatable)",
            "workers": "data-parallel worker counts, e.g. 1,2,4 (default)",
            "gpus": "GPU counts, e.g. 1,2,4 (implies --device gpu)",
            "epochs": "epochs per run (default: the paper's, 40 or 20)",
            "global_batch_size": "total batch over all workers (default: "
                                 "the paper's)",
            "data_dir": "folder that holds <dataset>/ (default: data/)",
            "synthetic": "train on synthetic data of the same shape",
            "train_samples": "use only the first N training samples",
            "test_samples": "use only the first N test samples",
            "target_loss": "training loss whose epochs/seconds to reach are "
                           "compared (default: the highest final loss)",
            "device": "cpu or gpu (default: cpu, gpu with --gpus)",
            "threads": "intra-op threads in all, shared by the workers",
            "seed": "seed of weights and sample order (default 0)",
            "out": "results root (default: results/)",
            "timeout": "seconds per run before it is stopped",
            "dry_run": "print the plan and stop"})
@user_errors
def converge(c, framework=None, network=None, workers=None, gpus=None,
             epochs=None, global_batch_size=None, data_dir=None,
             synthetic=False, train_samples=None, test_samples=None,
             target_loss=None, device=None, threads=None, seed=0, out=None,
             timeout=None, dry_run=False):
    """Convergence with data parallelism: loss curves for 1/2/4 workers."""
    from dlrepro import converge as conv
    if not network:
        raise UserError(f"name at least one --network: "
                        f"{', '.join(conv.NETWORKS)}")
    if gpus is not None and workers is not None:
        raise UserError("give --workers or --gpus, not both")
    if gpus is not None and device not in (None, "gpu"):
        raise UserError("--gpus needs --device gpu")
    device = device or ("gpu" if gpus is not None else "cpu")
    counts = conv.parse_counts(gpus or workers or "1,2,4",
                               "--gpus" if gpus else "--workers")
    specs = conv.plan(framework, network, counts, device=device,
                      global_batch=global_batch_size, epochs=epochs,
                      seed=seed, threads=threads, data_dir=data_dir,
                      synthetic=synthetic, train_samples=train_samples,
                      test_samples=test_samples, target_loss=target_loss)
    for spec in specs:
        print(f"{conv.run_name(spec)}: {spec['epochs']} epochs, global batch "
              f"{spec['global_batch_size']}, {spec['data']['source']} "
              f"{spec['data']['name']}")
    if dry_run:
        return
    conv.check_data(specs)
    pythons = conv.environments(specs)
    run_dir, _ = conv.run(specs, out or conv.DEFAULT_OUT, pythons=pythons,
                          timeout=conv._positive(timeout, "timeout") or
                          conv.DEFAULT_TIMEOUT_S,
                          command=sys.argv)
    record, results = conv.load_run(run_dir)
    print("\n".join(conv.table_lines(conv.summarise(results))))
    print(f"results: {run_dir}")
