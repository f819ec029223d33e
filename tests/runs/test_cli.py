"""The tasks as a user runs them: one-line errors with exit status 2."""
import subprocess

import pytest
from cli import invoke
from paths import INVOKE, SCRIPTED


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
    # Every process is planned up front: a huge count filled memory.
    (["--framework", "pytorch", "--repeat", "100000000"],
     "error: --repeat must be at most 1000, got 100000000"),
    # Issue 23, item 11: these passed planning and ended as error cells.
    (["--framework", "pytorch", "--seed", "100000000000000000000000000"],
     "error: --seed must be at most 2147483646, got 1000000000000000000000"),
    (["--framework", "pytorch", "--network", "fcn5", "--batch-size",
      "100000000000000000000"],
     "error: batch_size 100000000000000000000 is too large for fcn5 in "
     "pytorch: its largest tensor would hold more elements than pytorch can "
     "index; at most 344773177214966"),
    (["--framework", "mxnet", "--network", "resnet50", "--batch-size",
      "4096"], "error: batch_size 4096 is too large for resnet50 in mxnet: "),
    # A transformer's sequence (NAME@STEPS) above its context; a batch of
    # gpt-small whose logits MXNet cannot index (1024 x 50257 per sequence).
    (["--framework", "pytorch", "--network", "gpt-small@2048"],
     "error: sequence length 2048 is above gpt-small's context of 1024 "
     "tokens"),
    (["--framework", "mxnet", "--network", "gpt-small", "--batch-size",
      "64"], "error: batch_size 64 is too large for gpt-small in mxnet: "
     "its largest tensor would hold more elements than mxnet can index; at "
     "most 41"),
])
def test_bad_input_is_one_line_and_exit_2(root, args, message):
    proc = invoke("bench", "--dry-run", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args,message", [
    (["overhead", "--rounds", "abc"],
     "error: --rounds must be an integer >= 1, got 'abc'"),
    (["overhead", "--rounds", "0"],
     "error: --rounds must be an integer >= 1, got 0"),
    (["overhead", "--block", "1.5"],
     "error: --block must be an integer >= 1, got '1.5'"),
    (["overhead", "--threads", "-2"],
     "error: --threads must be an integer >= 1, got -2"),
    (["lock", "--image", ""],
     "error: --image must name an image, got an empty name"),
    (["data", "--dataset", "mnist", "--data-dir", "{tmp}", "--mirror",
      "nohost"], "error: --mirror must be a base URL (http://HOST/PATH, "),
    (["data", "--dataset", "mnist", "--data-dir", "{tmp}", "--mirror",
      "http://[::1"], "error: --mirror 'http://[::1' is not a URL: Invalid "
     "IPv6 URL"),
    (["data", "--dataset", "mnist", "--data-dir", "{tmp}", "--mirror",
      "http://127.0.0.1:abc/x"], "error: --mirror 'http://127.0.0.1:abc/x' "
     "is not a URL: Port could not be cast to integer value as 'abc'"),
], ids=["overhead-rounds-word", "overhead-rounds-0", "overhead-block-float",
        "overhead-threads-negative", "lock-empty-image", "data-mirror-no-url",
        "data-mirror-bad-ipv6", "data-mirror-port-word"])
def test_other_tasks_bad_input_is_one_line_and_exit_2(args, message,
                                                       tmp_path):
    """Tracebacks before: Invoke's own int() of an int default, docker-py's
    NullResource for an empty name, urllib's ValueError for a URL it cannot
    open. Each is refused before anything is created, pulled or fetched."""
    proc = invoke(*[a.format(tmp=tmp_path) for a in args])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1
    assert not any(tmp_path.iterdir())


def test_malformed_suite_file_is_named(root, tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text('name = "broken"\n[[group]]\nnetworks = ["fcn5"]\n')
    proc = invoke("bench", "--framework", "pytorch", "--suite", str(bad),
                  "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr == (f"error: {bad} [[group]] #1: missing "
                           f"`batch_sizes`\n")


def test_unwritable_output_folder(root, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = invoke("bench", "--framework", "pytorch", "--runtime",
                  "native", "--network", "fcn-r", "--out", str(blocker / "x"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: cannot write results to {blocker}/x:")


def test_dry_run_prints_the_plan(root):
    # Each framework's default mode: PyTorch's and TensorFlow's CPU cells
    # are forked from a server that imported the framework, under Docker
    # as natively (dlrepro.run.groups.FORK_DEFAULTS).
    proc = invoke("bench", "--framework", "pytorch,tensorflow",
                  "--network",
                  "fcn-r", "--batch-size", "8", "--threads", "1",
                  "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "2 cells:",
        "  pytorch-cpu-fcn-r-cpu-b8-t1                      iterations=5 "
        "warmup=2 runtime=docker isolation=fork",
        "  tensorflow-cpu-fcn-r-cpu-b8-t1                   iterations=5 "
        "warmup=2 runtime=docker isolation=fork",
    ]


def test_a_named_isolation_holds_for_every_framework(root):
    for mode in ("cell", "group"):
        proc = invoke("bench", "--framework", "pytorch,tensorflow",
                      "--network", "fcn-r", "--threads", "1", "--dry-run",
                      "--isolation", mode)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.count(f"isolation={mode}") == 2, proc.stdout


def test_list_names_frameworks_networks_and_suites(root):
    proc = invoke("list")
    assert proc.returncode == 0, proc.stderr
    assert "  pytorch " in proc.stdout
    assert "  fcn5         117,997,696 params" in proc.stdout
    assert "  smoke " in proc.stdout


@pytest.mark.parametrize("args,message", [
    (["--seed", "2147483647"], "error: --seed must be at most 2147483646"),
    (["--global-batch-size", "100000000000000000000"],
     "error: a global batch of 100000000000000000000 samples is larger "
     "than the 60000 training samples of mnist"),
    (["--train-samples", "64", "--global-batch-size", "128"],
     "error: a global batch of 128 samples is larger than the 64 training "
     "samples of mnist: not one batch to train on"),
])
def test_converge_bounds_are_checked_at_planning(root, args, message):
    """Issue 23, item 11: a global batch larger than --train-samples
    trained on no batch at all, and ended an error with exit 0."""
    proc = invoke("converge", "--framework", "pytorch", "--network",
                  "fcn-r", "--synthetic", "--workers", "1", "--dry-run",
                  *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert proc.stderr.count("\n") == 1


def _fake_bench(root, out, *args, modes=""):
    import os
    return subprocess.run(
        [INVOKE, "bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--iterations", "3", "--warmup", "1",
         "--out", str(out), *args], cwd=root, capture_output=True, text=True,
        timeout=120, env=dict(os.environ, DLREPRO_FAKE_MODES=modes))


def test_a_run_with_no_usable_result_exits_1(root, tmp_path):
    """Issue 23, item 11: `invoke bench` exited 0 when every job failed;
    now the table is printed, then one line and status 1. One ok job is
    enough for 0."""
    failed = _fake_bench(root, tmp_path / "a", "--network", "fcn5",
                         "--network", "fcn8", "--threads", "1",
                         modes="fcn5=crash,fcn8=kill")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert ": 2 error\n" in failed.stdout and "fcn8" in failed.stdout
    assert failed.stderr.startswith("error: no job ended ok: ")
    assert failed.stderr.count("\n") == 1
    unsupported = _fake_bench(root, tmp_path / "b", "--network", "fcn5",
                              "--threads", "4096")
    assert unsupported.returncode == 1, unsupported.stdout
    assert "1 unsupported" in unsupported.stdout
    mixed = _fake_bench(root, tmp_path / "c", "--network", "fcn5",
                        "--network", "fcn8", "--threads", "1",
                        modes="fcn8=crash")
    assert mixed.returncode == 0, mixed.stdout + mixed.stderr


def test_a_convergence_run_with_no_usable_result_exits_1(root, tmp_path):
    proc = invoke("converge", "--framework", "pytorch", "--network",
                  "fcn-r", "--synthetic", "--train-samples", "256",
                  "--test-samples", "64", "--global-batch-size", "64",
                  "--epochs", "50", "--workers", "1", "--timeout", "1",
                  "--runtime", "native", "--out", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "timeout" in proc.stdout
    assert proc.stderr.startswith("error: no convergence run ended ok or "
                                  "diverged: ")
    assert proc.stderr.count("\n") == 1


def test_converge_looks_for_its_runs_under_results_in_the_working_directory(
        root, tmp_path):
    """One default for --out: converge's, like bench's, report's and
    export's, is `results` under the working directory (it was the
    repository's, so `--resume` from elsewhere resumed a run there)."""
    proc = subprocess.run(
        [INVOKE, "-r", str(root), "converge", "--framework", "pytorch",
         "--network", "fcn-r", "--workers", "1", "--runtime", "native",
         "--resume"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == ("error: no convergence run under results to "
                           "resume; run without --resume\n")


def test_bench_and_converge_have_one_default_for_out(root):
    helps = [invoke("--help", task).stdout for task in
             ("bench", "converge", "report", "export")]
    for text in helps:
        assert "(default: results, under the working" in " ".join(
            text.split()), text


def test_bench_is_one_function_the_task_and_tests_call(tmp_path, monkeypatch):
    """`invoke bench` parses its flags and calls dlrepro.bench.runner.bench;
    a test calls the same function and gets the run the task makes."""
    from dlrepro.bench import runner
    from dlrepro.run import store
    from scripted import BENCH, SCRIPTED, invoke as invoke_bench
    monkeypatch.setenv("DLREPRO_FAKE_MODES", "")
    said = []
    run_dir = runner.bench(runner.BenchFlags(
        framework=["pytorch"], runtime="native", python=SCRIPTED,
        iterations="3", warmup="1", threads=["1"], network=["fcn5"],
        out=str(tmp_path / "called")), "called", echo=said.append)
    proc = invoke_bench(*BENCH, "--network", "fcn5", "--out",
                        str(tmp_path / "task"))
    assert proc.returncode == 0, proc.stderr
    assert run_dir == (tmp_path / "called" / "latest").resolve()
    assert said[-1] == f"\n{run_dir}: 1 ok"
    assert proc.stdout.splitlines()[-1].endswith(": 1 ok")
    called, task = (store.runs(tmp_path / name)[0] for name in
                    ("called", "task"))
    assert [e["spec"] for e, _ in called.jobs] == \
        [e["spec"] for e, _ in task.jobs]
    table = proc.stdout.splitlines()
    table = table[next(i for i, line in enumerate(table)
                       if line.startswith("framework")):]
    # The same table (its numbers are each run's own).
    assert [line.split()[:7] for line in said[:3]] == \
        [line.split()[:7] for line in table[:3]]
