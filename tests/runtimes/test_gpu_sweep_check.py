"""benchmarks/gpu_sweep_check.py, the prepared check for a GPU machine,
run on the CPU: the fake NVML stands in for one H200, PyTorch's own venv
for the GPU machine's Python. The same path as on the GPU (the gate, the
sweeps through `invoke bench`, precision modes, the report), tiny cells."""
import json
import subprocess
import sys

import fake_nvml
from paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_sweep_check.py"


def test_the_check_runs_end_to_end_on_a_cpu(tmp_path, framework_python):
    python = framework_python("pytorch")
    env, _state = fake_nvml.child_env(tmp_path, [fake_nvml.hopper_h200()],
                                      path_extra=[ROOT])
    out = tmp_path / "check"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--quick",
         "--frameworks", "pytorch", "--python", str(python), "--out",
         str(out), "--budget", "900"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    # The gate judged every GPU profile on the (fake) H200.
    verdicts = summary["gate"][0]["verdicts"]
    assert verdicts["mxnet/cuda"]["verdict"] == "unsupported"
    assert verdicts["pytorch/cuda"]["verdict"] == "native"
    assert summary["choices"]["mxnet"]["profile"] == "ngc"
    # The sweep ran every cell in three processes, through invoke bench.
    sweep = summary["sweeps"][0]
    assert sweep["exit"] == 0
    assert [c["id"].split("-")[2] for c in sweep["cells"]] == ["fcn5"]
    assert all(c["status"] == "ok" and c["processes"] == 3
               for c in sweep["cells"])
    modes = [(r["precision"], r["cell"]["status"])
             for r in summary["precision_compile"]]
    assert modes == [("bf16", "ok"), ("fp32", "ok")]
    assert summary["best_mode"] is not None
    assert "no --timm-benchmark given" in summary["timm"]["skipped"]
    report = (out / "report.txt").read_text()
    assert "mxnet: ngc" in report and "timm's training benchmark" in report
