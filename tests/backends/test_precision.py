"""Precision and compilation as cell fields, and executed training FLOPs.

The contract (harness.frameworks): a backend's PRECISIONS and
COMPILE_MODES decide, before the framework is imported, what a cell may
ask; what it does ask is run by the real frameworks here (CPU), each cell
through `python -m harness run`. FLOPs: the executed count is checked
against PyTorch's own counter (torch.utils.flop_counter) per network.
"""
import json
import subprocess
import types

import pytest
import standins
from probes import run_cell, run_probe

from dlrepro.bench import plan
from harness import arithmetic, frameworks, networks as nets, spec
from harness.gpu import peaks
from harness.errors import HarnessError, Unsupported
from harness.frameworks import backends
from paths import INVOKE, ROOT, SCRIPTED



def _python(framework):
    from dlrepro import matrix
    from dlrepro.images import envs
    entry = matrix.entry(matrix.load(), framework, "cpu")
    return str(envs.ensure(framework, "cpu", entry, log=lambda *args: None))


# --- the cell fields ------------------------------------------------------------

def test_a_cell_without_the_fields_reads_as_the_frameworks_defaults(make_cell):
    cell = make_cell()
    cell.pop("precision", None)
    cell.pop("compile", None)
    checked = spec.validate_cell(cell)
    assert checked["precision"] == "default" and checked["compile"] is None
    assert tuple(checked) == spec.CELL_FIELDS


@pytest.mark.parametrize("field, value, message", [
    ("precision", "fp8", "precision must be one of default, fp32, tf32, "
                         "bf16, fp16, got 'fp8'"),
    ("compile", "Max Autotune", "compile must be a mode name"),
    ("compile", 1, "compile must be a mode name"),
])
def test_bad_values_are_named(make_cell, field, value, message):
    with pytest.raises(HarnessError, match=message):
        spec.validate_cell(make_cell(**{field: value}))


def test_a_compile_mode_needs_a_warmup_to_compile_in(make_cell):
    with pytest.raises(HarnessError, match="give warmup >= 1"):
        spec.validate_cell(make_cell(compile="default", warmup=0))
    # No compilation asked: a warm-up of 0 stays allowed.
    spec.validate_cell(make_cell(compile="none", warmup=0))


def test_cells_differing_only_in_precision_or_compile_are_other_cells(make_cell):
    ids = {plan.cell_id(make_cell(precision=p, compile=c))
           for p in ("default", "fp32", "bf16") for c in (None, "none", "xla")}
    assert len(ids) == 9
    assert plan.cell_id(make_cell(precision="default", compile=None)) == \
        "pytorch-cpu-fcn-r-cpu-b8-t1"


# --- the backend contract -------------------------------------------------------

def _backend(**declared):
    return types.SimpleNamespace(NAME="plain",
                                 CAPABILITIES=backends.capabilities(**declared))


def test_a_backend_declaring_nothing_gets_fp32_and_no_compilation():
    plain = _backend()
    assert frameworks.prepare_options(plain, "default", None) == {
        "precision": "default", "compile_mode": "none"}
    assert frameworks.prepare_options(plain, "fp32", "none") == {
        "precision": "fp32", "compile_mode": "none"}
    with pytest.raises(Unsupported, match="the plain backend offers "
                       "precision default, fp32 only, not 'bf16'"):
        frameworks.prepare_options(plain, "bf16", None)
    with pytest.raises(Unsupported, match="offers compile mode none only, "
                       "not 'xla'"):
        frameworks.prepare_options(plain, "default", "xla")


def test_declared_values_reach_prepare_resolved():
    jax_like = _backend(compile_modes=("jit",))
    # Both are passed, resolved: null means the backend's first mode.
    assert frameworks.prepare_options(jax_like, "fp32", None) == {
        "precision": "fp32", "compile_mode": "jit"}
    both = _backend(precisions=("default", "bf16"),
                    compile_modes=("none", "default"))
    assert frameworks.prepare_options(both, "bf16", "default") == {
        "precision": "bf16", "compile_mode": "default"}


def test_a_backends_own_reason_replaces_the_generic_one():
    from harness.frameworks.cntk import backend as cntk
    with pytest.raises(Unsupported, match="no automatic mixed precision"):
        frameworks.prepare_options(cntk, "fp16", None)


def test_fp16_on_a_cpu_needs_float16_arithmetic():
    with pytest.raises(Unsupported, match="no float16 arithmetic"):
        backends.check_cpu_fp16("PyTorch", {"avx512f", "avx512_bf16"})
    backends.check_cpu_fp16("PyTorch", {"avx512f", "avx512_fp16"})


# --- what the result says ---------------------------------------------------------

def test_default_is_recorded_as_what_it_resolves_to():
    block = arithmetic.precision_block(
        "default", "gpu", {"matmul": "fp32", "conv": "tf32"})
    assert block["resolved"] == "tf32 conv, fp32 matmul"
    assert arithmetic.precision_block("default", "cpu", None)["resolved"] == \
        "fp32"
    assert arithmetic.precision_block("default", "gpu", None)["note"] == \
        "the backend does not report its math mode"


def test_strict_fp32_reported_as_tf32_is_an_error():
    with pytest.raises(HarnessError, match="strict fp32 asked"):
        arithmetic.precision_block("fp32", "gpu",
                                   {"matmul": "fp32", "conv": "tf32"})


def test_compilation_time_is_the_first_iterations_excess():
    block = arithmetic.compilation_block("default", "default", [20.0, 0.2],
                                         0.1)
    assert block["first_iteration_s"] == 20.0
    assert block["first_iteration_excess_s"] == pytest.approx(19.9)
    # The last warm-up iteration at 2x a steady one: compiled in time.
    assert arithmetic.warnings_for(block, 0.1) == []
    (warning,) = arithmetic.warnings_for(block, 0.05)
    assert warning.startswith("the last warm-up iteration took 4.0x")


def test_mfu_uses_the_autocast_peak():
    h100 = peaks.BY_KEY["h100-sxm"]
    assert peaks.precision_for(h100, None, True, "bf16")[0] == "bf16"
    fp32, _ = peaks.precision_for(h100, {"matmul": "fp32", "conv": "tf32"},
                                  True)
    assert fp32 == "tf32"
    # No bf16 tensor cores on a V100: its FP32 peak, said.
    precision, note = peaks.precision_for(peaks.BY_KEY["v100-sxm2"], None,
                                          True, "bf16")
    assert precision == "fp32" and "no bf16 peak" in note


# --- FLOPs -----------------------------------------------------------------------

def test_executed_flops_leave_out_gradients_nothing_needs():
    # The figures: 3 x forward overstates these by this much.
    inflation = {"fcn5": 0.183, "fcn8": 0.163, "alexnet-r": 0.071,
                 "fcn-r": 0.039, "alexnet": 0.030, "resnet50": 0.010}
    for name, expected in inflation.items():
        network = nets.get(name)
        ratio = (nets.flops_per_iteration(network, 4) /
                 nets.executed_flops_per_iteration(network, 4))
        assert ratio - 1 == pytest.approx(expected, abs=0.0005), name


FLOP_PROBE = """
import json, sys
import torch
from torch.utils.flop_counter import FlopCounterMode
from harness import networks as nets
from harness.frameworks.pytorch import backend
out = {}
for name in sorted(nets.NETWORKS):
    network = nets.get(name)
    # On the meta device: shapes and dispatch only, nothing computed.
    model = backend.build_model(network, 1, "cpu", 0).to("meta")
    shape = (2,) + tuple(network.input_shape)
    if network.input_dtype == "int64":
        x = torch.zeros(shape, dtype=torch.int64, device="meta")
        y = torch.zeros(shape, dtype=torch.int64, device="meta")
    else:
        x = torch.zeros(shape, device="meta")
        y = torch.zeros((2,), dtype=torch.int64, device="meta")
    counter = FlopCounterMode(display=False)
    with counter:
        logits = model(x)
        logits = logits.reshape(-1, logits.shape[-1])
        torch.nn.functional.cross_entropy(logits, y.reshape(-1)).backward()
    out[name] = counter.get_total_flops()
print(json.dumps(out))
"""


def test_executed_flops_match_pytorchs_counter_per_network():
    counted = run_probe(_python("pytorch"), ROOT, FLOP_PROBE)
    assert sorted(counted) == sorted(nets.NETWORKS)
    for name, flops in counted.items():
        assert flops == nets.executed_flops_per_iteration(
            nets.get(name), 2), name


# --- real frameworks --------------------------------------------------------------

def _cell(make_cell, framework, **fields):
    fields.setdefault("iterations", 2)
    fields.setdefault("warmup", 1)
    return make_cell(framework=framework, **fields)


def test_pytorch_bf16_compiled_cell(make_cell, tmp_path):
    result = run_cell(_python("pytorch"), ROOT, tmp_path, _cell(
        make_cell, "pytorch", network="alexnet-r", precision="bf16",
        compile="default"))
    assert result["status"] == "ok", result["error"]
    assert result["precision"]["resolved"] == "bf16"
    assert result["precision"]["autocast"] == "bf16"
    assert result["compilation"]["mode"] == "default"
    # Compiling makes the first iteration far slower than a steady one.
    assert result["compilation"]["first_iteration_excess_s"] > \
        10 * result["timing"]["median_s"]


@pytest.mark.parametrize("precision, status, resolved", [
    ("fp32", "ok", "fp32"), ("tf32", "unsupported", None)])
def test_pytorch_fp32_is_strict_and_cpu_tf32_unsupported(
        make_cell, tmp_path, precision, status, resolved):
    result = run_cell(_python("pytorch"), ROOT, tmp_path, _cell(
        make_cell, "pytorch", precision=precision))
    assert result["status"] == status, result["error"]
    if resolved:
        assert result["precision"]["math_mode"] == {"matmul": "fp32",
                                                    "conv": "fp32"}
    else:
        assert "no TF32 mode" in result["error"]["message"]


def test_undeclared_choices_end_before_the_framework_is_imported(
        make_cell, tmp_path):
    # CNTK is not installed in PyTorch's environment: the reason is CNTK's
    # own, not an import error.
    result = run_cell(_python("pytorch"), ROOT, tmp_path, _cell(
        make_cell, "cntk", precision="bf16"))
    assert result["status"] == "unsupported"
    assert result["error"]["message"] == "CNTK 2.7 has no bfloat16 type"


def test_tensorflow_mixed_precision_and_compile_modes(make_cell, tmp_path):
    python = _python("tensorflow")
    for precision, mode in (("bf16", "xla"), ("fp32", "none")):
        result = run_cell(python, ROOT, tmp_path, _cell(
            make_cell, "tensorflow", network="alexnet-r",
            precision=precision, compile=mode))
        assert result["status"] == "ok", result["error"]
        assert result["precision"]["resolved"] == precision
        assert result["compilation"]["mode"] == mode


TF_FP16_PROBE = """
import json, math
from harness import networks as nets
from harness.frameworks import backends
# This CPU has no float16 arithmetic: pretend it has, to run the loss-scaled
# fp16 path of the GPU on the CPU (emulated: slow, but the same code).
backends.cpu_flags = lambda: {"avx512_fp16"}
from harness.frameworks.tensorflow import backend
backend.configure(1, "cpu", 0)
session = backend.prepare(nets.get("fcn-r"), 8, "cpu", 0, precision="fp16")
losses = [session.step() for _ in range(3)]
print(json.dumps({"losses": losses, "scaling": session.loss_scaling,
                  "dtype": session.model.layers[-1].compute_dtype}))
"""


def test_tensorflow_fp16_scales_the_loss(tmp_path):
    report = run_probe(_python("tensorflow"), ROOT, TF_FP16_PROBE)
    assert report["dtype"] == "float16"
    assert report["scaling"].startswith("dynamic")
    assert all(loss == loss for loss in report["losses"])  # no NaN


def test_mxnet_bf16_amp_and_its_lstm_limit(make_cell, tmp_path):
    python = _python("mxnet")
    result = run_cell(python, ROOT, tmp_path, _cell(
        make_cell, "mxnet", network="alexnet-r", precision="bf16"))
    assert result["status"] == "ok", result["error"]
    assert result["compilation"]["mode"] == "hybridize"
    result = run_cell(python, ROOT, tmp_path, _cell(
        make_cell, "mxnet", network="lstm", batch_size=4,
        global_batch_size=4, precision="bf16"))
    assert result["status"] == "unsupported"
    assert "--compile none" in result["error"]["message"]


# --- resume ----------------------------------------------------------------------

def _bench(tmp_path, *extra):
    return subprocess.run(
        [INVOKE, "bench", "--framework", "pytorch", "--runtime", "native",
         "--python", SCRIPTED, "--network", "fcn5", "--batch-size", "4",
         "--iterations", "2", "--warmup", "1", "--threads", "1", "--out",
         str(tmp_path), *extra], cwd=ROOT, capture_output=True, text=True,
        timeout=300)


def test_resume_runs_a_cell_again_for_another_precision_or_mode(tmp_path):
    first = _bench(tmp_path)
    assert first.returncode == 0, first.stderr
    for extra, done in ((("--precision", "fp32"), "0 of 1"),
                        (("--precision", "fp32"), "1 of 1"),
                        (("--compile", "none"), "0 of 1"),
                        ((), "1 of 1")):
        proc = _bench(tmp_path, "--resume", *extra)
        assert proc.returncode == 0, proc.stderr
        assert f"{done} jobs already done" in proc.stdout, (extra, proc.stdout)


# --- MFU on a (faked) GPU ---------------------------------------------------------

BF16_STANDIN = standins.source(
    "pytorch", """The real PyTorch backend with `gpu` cells computed on the
CPU (there is no GPU here; NVML is faked), bf16 autocast included.""",
    declared='CAPABILITIES = _real.CAPABILITIES._replace(\n'
             '    precisions=("default", "bf16"))\n')


@pytest.mark.parametrize("precision, peak", [("bf16", "bf16"),
                                             ("default", None)])
def test_mfu_is_measured_against_the_peak_of_the_precision(
        make_cell, tmp_path, precision, peak):
    import fake_nvml
    env, _ = fake_nvml.child_env(tmp_path, [fake_nvml.ampere_a100()],
                                 path_extra=[ROOT])
    standins.write(tmp_path / "shim", BF16_STANDIN)
    cell = make_cell(profile="cuda", device="gpu", gpus=1, threads=None,
                     network="alexnet-r", batch_size=4, global_batch_size=4,
                     iterations=2, warmup=1, precision=precision)
    result = standins.run(_python("pytorch"), cell, tmp_path, env)
    mfu = result["model"]["mfu"]
    # Default on an A100: PyTorch's cuDNN convolutions may run as TF32.
    assert mfu["precision"] == (peak or "tf32")
    assert mfu["achieved_flops_per_s"] == pytest.approx(
        result["model"]["executed_flops_per_iteration"] /
        result["timing"]["mean_s"])


def test_bad_flags_are_one_line_errors():
    for args, message in (
            (("--precision", "fp8"), "error: --precision: precision must be "
             "one of default, fp32, tf32, bf16, fp16, got 'fp8'\n"),
            (("--compile", "default", "--warmup", "0"),
             "error: --compile default compiles in the first iteration: give "
             "--warmup 1 or more\n")):
        proc = subprocess.run([INVOKE, "bench", "--framework", "pytorch",
                               "--dry-run", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stderr == message


def test_torch_compile_without_a_compiler_is_unsupported(make_cell, tmp_path):
    # A machine without a C++ compiler: the cell says so instead of failing
    # inside inductor.
    cell = _cell(make_cell, "pytorch", compile="default")
    (tmp_path / "spec.json").write_text(json.dumps({"cell": cell,
                                                    "container": None}))
    proc = subprocess.run(
        [_python("pytorch"), "-s", "-m", "harness", "run", "--spec",
         str(tmp_path / "spec.json"), "--out", str(tmp_path / "out.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={"PATH": str(tmp_path), "PYTHONPATH": str(ROOT),
             "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["status"] == "unsupported"
    assert result["error"]["message"] == (
        "torch.compile needs a C++ compiler (g++) for inductor's CPU code; "
        "none is on PATH")
