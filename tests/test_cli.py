"""The tasks as a user runs them: one-line errors with exit status 2."""
import subprocess
import sys
from pathlib import Path

import pytest

INVOKE = str(Path(sys.executable).parent / "invoke")


def invoke(root, *args):
    return subprocess.run([INVOKE, *args], cwd=root, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args,message", [
    (["--framework", "theano"], "error: unknown framework 'theano'; valid "
     "frameworks: caffe, cntk, jax, mxnet, pytorch, tensorflow"),
    (["--framework", "pytorch", "--network", "vgg"],
     "error: unknown network 'vgg'; valid networks: alexnet, alexnet-r, "),
    (["--framework", "pytorch", "--suite", "nightly"],
     "error: unknown suite 'nightly'; valid suites: "),
    (["--framework", "pytorch", "--profile", "rocm"],
     "error: unknown profile 'rocm' for pytorch; valid profiles: "),
    (["--framework", "pytorch", "--runtime", "singularity"],
     "error: unknown runtime 'singularity'; valid runtimes: charliecloud, "
     "docker, native, podman"),
    (["--framework", "pytorch", "--batch-size", "0"],
     "error: --batch-size must be an integer >= 1, got 0"),
    (["--framework", "pytorch", "--batch-size", "big"],
     "error: --batch-size must be an integer >= 1, got 'big'"),
    (["--framework", "pytorch", "--iterations", "-3"],
     "error: --iterations must be an integer >= 1, got -3"),
    (["--framework", "pytorch", "--threads", "0"],
     "error: --threads must be an integer >= 1, got 0"),
    (["--framework", "pytorch", "--device", "tpu"],
     "error: --device must be cpu or gpu, got 'tpu'"),
    (["--framework", "pytorch", "--clock-policy", "turbo"],
     "error: --clock-policy: clock_policy must be observe, disable-boost or "
     "lock=<MHz>"),
    ([], "error: choose frameworks: --framework NAME (repeatable) or --all"),
])
def test_bad_input_is_one_line_and_exit_2(root, args, message):
    proc = invoke(root, "bench", "--dry-run", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_malformed_suite_file_is_named(root, tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\n[[group]]\nnetworks = ["fcn5"]\n')
    proc = invoke(root, "bench", "--framework", "pytorch", "--suite", str(bad),
                  "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {bad} [[group]] #1: missing "
                           f"`batch_sizes`\n")


def test_unwritable_output_folder(root, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = invoke(root, "bench", "--framework", "pytorch", "--runtime",
                  "native", "--network", "fcn-r", "--out", str(blocker / "x"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: cannot write results to {blocker}/x:")


def test_dry_run_prints_the_plan(root):
    proc = invoke(root, "bench", "--framework", "pytorch,mxnet", "--network",
                  "fcn-r", "--batch-size", "8", "--threads", "1", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "2 cells:",
        "  pytorch-cpu-fcn-r-cpu-b8-t1                      iterations=5 "
        "warmup=2 runtime=docker",
        "  mxnet-cpu-fcn-r-cpu-b8-t1                        iterations=5 "
        "warmup=2 runtime=docker",
    ]


def test_list_names_frameworks_networks_and_suites(root):
    proc = invoke(root, "list")
    assert proc.returncode == 0, proc.stderr
    assert "  pytorch " in proc.stdout
    assert "  fcn5         117,997,696 params" in proc.stdout
    assert "  smoke " in proc.stdout
