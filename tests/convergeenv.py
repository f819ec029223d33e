"""What the convergence test modules share (tests/backends/test_converge_pure.py,
test_converge_training.py, test_converge_faults.py, and the multi-node
ones): the tolerance between 1 and 2 workers' curves, the specs of a
plan, a native runtime, and the harness's converge command."""
import json
import os
import subprocess

from dlrepro.converge import plan as conv_plan
from dlrepro.run import runtimes


# 1 vs 2 workers: the same global batches, gradients averaged over the
# global batch, so the curves differ only by float32 reduction order
# (observed: below 1e-5 over 32 iterations). 1e-3 of the loss is 100x that,
# and 100x below what a real fault moves the curve by: a different seed
# (tests/backends/test_converge_training.py checks it), a doubled learning rate
# (gradients summed instead of averaged) or workers training on the same
# half of the batch all change the loss by 0.05 or more within a few
# iterations.
RELATIVE_TOLERANCE = 1e-3

# The GPU profiles live in the matrix of the GPU work; the plan only needs to
# find one.
GPU_MATRIX = {"pytorch": {"cpu": {"device": "cpu"}, "cuda": {"device": "gpu"}}}


def _max_relative(a, b):
    return max(abs(x - y) / abs(x) for x, y in zip(a, b))


def _plan(*args, **kwargs):
    """The specs of a convergence plan."""
    return [job.spec for job in conv_plan.plan(*args, **kwargs)]


def _native(python):
    return runtimes.get("native", python=str(python))


def harness_env(root, out, **extra):
    """The environment of a harness process a test starts itself: the
    repository on its path, and a temp dir of its own beside `out`, as the
    native runtime gives each process, so that what it leaves there
    (torchrun's log folder, a killed run's plan) goes with the test's
    folder rather than staying in the machine's /tmp."""
    temp = out.parent / (out.name + ".tmp")
    temp.mkdir(exist_ok=True)
    return dict(os.environ, PYTHONPATH=str(root), TMPDIR=str(temp), **extra)


def _harness(python, root, spec, out):
    spec_path = out.with_suffix(".spec.json")
    spec_path.write_text(json.dumps({"convergence": spec, "container": None}))
    env = harness_env(root, out)
    return subprocess.run([str(python), "-s", "-m", "harness", "converge",
                           "--spec", str(spec_path), "--out", str(out)],
                          cwd=root, env=env, capture_output=True, text=True)
