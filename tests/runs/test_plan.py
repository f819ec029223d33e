"""Planning: suite x flags -> cells, with narrowing, overrides and skips."""
import subprocess
import sys

import pytest

from dlrepro import matrix
from dlrepro.bench import plan
from dlrepro.bench import suites
from dlrepro.errors import UserError
from paths import ROOT

M = matrix.load()
# Planning only needs a GPU profile to exist; its contents do not matter.
M.setdefault("pytorch", {}).setdefault(
    "cuda", dict(M["pytorch"]["cpu"], device="gpu"))
HOST = plan.Host(cpus=2, gpus=0)


def build(suite="smoke", **options):
    options.setdefault("frameworks", ("pytorch",))
    return plan.build(suites.load(suite), plan.Options(**options), M, HOST)


def test_smoke_plan_has_one_cell_per_network_and_framework():
    cells = build(frameworks=("pytorch", "mxnet"))
    assert len(cells) == 22  # 11 networks (gpt-small only in modern-*)
    first = cells[0].spec
    assert first["threads"] == 2 and first["gpus"] == 0
    assert first["dataset"] == "synthetic"
    assert cells[0].id == "pytorch-cpu-fcn5-cpu-b16-t2"


def test_networks_narrow_and_batch_sizes_override():
    cells = build(networks=("fcn-r",), batch_sizes=(32, 64))
    assert [c.id for c in cells] == ["pytorch-cpu-fcn-r-cpu-b32-t2",
                                     "pytorch-cpu-fcn-r-cpu-b64-t2"]


def test_network_outside_the_suite_needs_a_batch_size():
    with pytest.raises(UserError, match="give --batch-size"):
        build("paper-synthetic-cpu", networks=("lstm",))
    cells = build("paper-synthetic-cpu", networks=("lstm",), batch_sizes=(8,),
                  threads=(1,))
    assert [c.id for c in cells] == ["pytorch-cpu-lstm-cpu-b8-t1"]


def test_iterations_warmup_and_seed_override():
    cell = build(networks=("fcn5",), iterations=7, warmup=0, seed=3)[0].spec
    assert (cell["iterations"], cell["warmup"], cell["seed"]) == (7, 0, 3)


def test_thread_counts_beyond_the_host_are_unsupported():
    cells = build("paper-synthetic-cpu", networks=("fcn5",))
    reasons = {c.spec["threads"]: c.skip_reason for c in cells}
    assert reasons[1] is None and reasons[2] is None
    assert reasons[4] == "needs 4 CPU threads; this host has 2 usable CPUs"


def test_gpu_cells_without_gpus_are_unsupported():
    cells = build("paper-multi-gpu", frameworks=("pytorch",))
    assert all(c.skip_reason.startswith("needs") for c in cells)
    split = [c.spec for c in cells if c.spec["network"] == "fcn-r"]
    assert [(c["batch_size"], c["gpus"], c["global_batch_size"])
            for c in split] == [(4096, 1, 4096), (2048, 2, 4096),
                                (1024, 4, 4096)]


def test_device_override_moves_cells_to_the_gpu():
    cell = build(networks=("fcn5",), device="gpu")[0]
    assert cell.spec["threads"] is None and cell.spec["gpus"] == 1
    assert cell.skip_reason == "needs 1 GPU(s); this host has 0"


def test_profile_must_match_the_device():
    with pytest.raises(UserError, match="is for gpu cells, not cpu"):
        build(profile="cuda")
    with pytest.raises(UserError, match="unknown profile 'rocm'"):
        build(profile="rocm")


def test_nothing_to_run_is_an_error():
    with pytest.raises(UserError, match="nothing to run"):
        build(frameworks=())


def test_format_plan_lists_every_cell():
    lines = plan.format_plan(build(networks=("fcn5", "fcn8")))
    assert lines[0] == "2 cells:"
    assert "pytorch-cpu-fcn8-cpu-b16-t2" in lines[2]


def test_the_paper_gpu_suites_disable_boost_unless_told_otherwise():
    """The paper's method is the default of its GPU suites; --clock-policy
    overrides it (observe on machines whose clocks must not change)."""
    from dlrepro.bench import suites
    m = matrix.load()
    host = plan.Host(cpus=2, gpus=1)
    for name in ("paper-synthetic-gpu", "paper-real-gpu", "paper-multi-gpu"):
        suite = suites.load(name)
        jobs = plan.build(suite, plan.Options(frameworks=("pytorch",)), m,
                          host)
        assert {j.spec["clock_policy"] for j in jobs} == {"disable-boost"}
        observed = plan.build(suite, plan.Options(
            frameworks=("pytorch",), clock_policy="observe"), m, host)
        assert {j.spec["clock_policy"] for j in observed} == {"observe"}
    smoke = plan.build(suites.load("smoke"),
                       plan.Options(frameworks=("pytorch",)), m, host)
    assert {j.spec["clock_policy"] for j in smoke} == {"observe"}


def test_a_suite_with_an_unknown_clock_policy_is_named(tmp_path):
    from dlrepro.bench import suites
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\n[defaults]\nclock_policy = "turbo"\n'
                   '[[group]]\nnetworks = ["fcn5"]\nbatch_sizes = [4]\n')
    with pytest.raises(UserError, match=f"{bad} \\[defaults\\]: "
                                        f"clock_policy must be"):
        suites.load(str(bad))


def test_options_need_no_runner(tmp_path):
    """bench.plan and bench.runner imported each other (inside options());
    plan stands below the runner."""
    code = ("import sys\n"
            "from dlrepro import matrix\n"
            "from dlrepro.bench import plan\n"
            "plan.options(matrix.load(), framework=['pytorch'], "
            "all_frameworks=False, profile=None, network=None, "
            "batch_size=None, device=None, threads=None, iterations=None, "
            "warmup=None, runtime='native', seed='0', clock_policy=None, "
            "timeout=None)\n"
            "print('dlrepro.bench.runner' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr
