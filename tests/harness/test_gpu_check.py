"""benchmarks/gpu_check.py, the script for a machine with a GPU: its guard
against changing clocks, and a smoke run here (no GPU: the fake NVML shows
an H200, PyTorch sees no CUDA, so the cells run on the CPU)."""
import json
import os
import subprocess
import sys

import fake_nvml
from clockcells import torch_python
from paths import ROOT

SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.py")

MATRIX = '''
[mxnet.cu112]
device = "gpu"
sass = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]
ptx = ""
min_driver = "460.27.03"
cuda = "11.2"
framework_version = "1.9.1"

[tensorflow.cuda]
device = "gpu"
sass = ["sm_60", "sm_70", "sm_80", "sm_89", "sm_90"]
ptx = "compute_90"
min_driver = "525.60.13"
cuda = "12.5"
framework_version = "2.21.0"

[pytorch.cpu]
device = "cpu"
sass = []
ptx = ""
'''


def test_refuses_to_change_clocks_without_permission_flag():
    proc = subprocess.run([sys.executable, SCRIPT, "--clock-policy",
                           "disable-boost"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--i-own-this-gpu" in proc.stderr


def test_rejects_a_malformed_policy_even_with_the_flag():
    proc = subprocess.run([sys.executable, SCRIPT, "--clock-policy", "fast",
                           "--i-own-this-gpu"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "observe, disable-boost or lock=" in proc.stderr


def test_smoke_without_a_gpu(tmp_path):
    env, fake = fake_nvml.child_env(tmp_path, [fake_nvml.hopper_h200()])
    env.pop("OUT", None)
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX)
    out = tmp_path / "out"
    python = torch_python()
    proc = subprocess.run(
        [python, SCRIPT, "--quick", "--networks", "fcn5", "--python",
         python, "--matrix", str(matrix), "--out", str(out)],
        cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (out / "report.txt").read_text()
    assert report == proc.stdout
    assert "GPU 0: NVIDIA H200, sm_90" in report
    assert "PyTorch sees no CUDA device" in report
    lines = report.splitlines()
    mxnet = [l for l in lines if l.strip().startswith("mxnet/cu112")]
    tensorflow = [l for l in lines if l.strip().startswith("tensorflow/cuda")]
    assert "unsupported" in mxnet[0] and "sm_90" in mxnet[0]
    assert "native" in tensorflow[0]
    assert not any(l.strip().startswith("pytorch/cpu") for l in lines)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["device"] == "cpu"
    assert [c["id"] for c in summary["cells"]] == ["fcn5-b2", "fcn5-b4"]
    assert all(c["result"]["status"] == "ok" for c in summary["cells"])
    assert all(len(c["result"]["timing"]["per_iteration_s"]) == 3
               for c in summary["cells"])
    # The same cells again, each a child of one fork server
    forked = summary["forked"]
    assert [c["id"] for c in forked] == ["fcn5-b2", "fcn5-b4"]
    assert all(c["result"]["status"] == "ok" for c in forked)
    assert [c["result"]["isolation"]["mode"] for c in forked] == ["fork"] * 2
    assert len({c["result"]["isolation"]["worker_pid"] for c in forked}) == 1
    table = report[report.index("== the same PyTorch cells forked"):]
    assert [line.split()[0] for line in table.splitlines()[2:4]] == [
        "fcn5-b2", "fcn5-b4"]
    # observe only: the script never asked NVML to change anything
    assert fake_nvml.use_file(fake)["calls"] == []


def _load_script():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load_report():
    _load_script()  # puts benchmarks/ on sys.path
    import gpu_check_report
    return gpu_check_report


def test_report_of_a_gpu_shaped_result(make_cell, tmp_path):
    """The GPU branches of the report, fed a result that the harness wrote
    for a stand-in GPU cell (fake H100, PyTorch on the CPU)."""
    from clockcells import GPU_CELL, start_cell
    proc, paths = start_cell(
        tmp_path, [fake_nvml.hopper_h100(reasons=0x4)],
        make_cell(GPU_CELL, iterations=3, warmup=1,
                  clock_policy="disable-boost"),
        stack={"sass": ["sm_80", "sm_90"], "ptx": "", "min_driver": "",
               "cuda": "13.0"})
    assert proc.wait(120) == 0, paths["log"].read_text()
    result = json.loads(paths["result"].read_text())
    cells = [{"id": "fcn-r-b2", "network": "fcn-r", "batch": 2, "exit": 0,
              "wall_s": 3.0, "result": result, "log_tail": []},
             {"id": "broken", "network": "fcn5", "batch": 2, "exit": 1,
              "wall_s": 1.0, "result": None, "log_tail": ["boom"]}]
    report = _load_report()
    table = "\n".join(report.format_cells(cells))
    details = "\n".join(report.format_details(cells))
    row = [l for l in table.splitlines() if l.startswith("fcn-r-b2")][0]
    assert " ok " in row and "1590" in row and "power_capping" in row
    assert "fp32" in row
    assert "gate: native (machine code sm_90 runs on sm_90)" in details
    assert "telemetry GPU 0: SM 1590/1590/1590 MHz" in details
    assert "sw_power_cap" in details
    assert "clocks GPU 0: application 1980/2619 MHz (SM/memory), default " \
        "1980/2619 MHz (SM/memory), max 1980/2619 MHz" in details
    assert "MFU " in details and "of fp32 peak" in details
    assert "| boom" in details
    gpus = [dict(result["environment"]["gpus"][0])]
    inventory = "\n".join(report.format_inventory(
        gpus, None, {"version": "2.11.0", "cuda": "13.0",
                     "cuda_available": True, "arch_list": ["sm_90"]},
        None, "gpu", []))
    assert "GPU 0: NVIDIA H100 80GB HBM3, sm_90, 80 GiB, driver 580.65.06" \
        in inventory


def test_torch_arch_list_becomes_a_gate_stack():
    script = _load_script()
    stack = script.torch_stack({"arch_list": ["sm_80", "sm_90a", "compute_90",
                                              "sm_87-odd"],
                                "cuda": "13.0", "version": "2.11.0"})
    assert stack["sass"] == ["sm_80", "sm_90a"]
    assert stack["ptx"] == ["compute_90"]
    assert script.torch_stack(None)["sass"] == []


def test_cells_past_the_time_budget_are_skipped(tmp_path):
    import time
    script = _load_script()
    lines = []
    cells = script.run_cells(sys.executable, "cpu", ["fcn5"],
                             script.QUICK_BATCHES, 1, 0, "observe",
                             str(tmp_path), 10, None, lines.append,
                             deadline=time.monotonic() + 5)
    assert [c["exit"] for c in cells] == ["skipped", "skipped"]
    assert all("time budget" in line for line in lines)
    assert list(tmp_path.iterdir()) == []
    assert "skipped" in "\n".join(_load_report().format_cells(cells))


def test_gpt_small_runs_in_bf16_in_pytorch_and_jax():
    script = _load_script()
    gpu = script.cell_plan("gpu", ["fcn5", "gpt-small"], script.GPU_BATCHES)
    assert [c for c in gpu if c[1].startswith("gpt")] == [
        ("gpt-small-pytorch-bf16-b8", "gpt-small", 8, "pytorch", "bf16"),
        ("gpt-small-jax-bf16-b8", "gpt-small", 8, "jax", "bf16")]
    # The paper's networks keep their ids and PyTorch as shipped.
    assert gpu[0] == ("fcn5-b512", "fcn5", 512, "pytorch", "default")
    cpu = script.cell_plan("cpu", ["gpt-small"], script.QUICK_BATCHES)
    assert {c[1] for c in cpu} == {"gpt-small@64"}
