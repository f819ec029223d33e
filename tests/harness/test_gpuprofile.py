"""The GPU profile a cell gets when --profile names none: per framework the
first in the matrix's order that the compatibility gate admits on the GPUs
found, across GPU generations (the fake NVML stands in for the GPUs)."""
import subprocess
import sys

import pytest

import fake_nvml
from dlrepro import hostinfo, matrix
from dlrepro.bench import gpuprofile, plan, suites
from paths import INVOKE, ROOT

FRAMEWORKS = ("pytorch", "tensorflow", "jax", "mxnet", "cntk", "caffe")
# The last driver of each generation's era that the fake machine runs
# (Kepler's branch ended at 470).
GENERATIONS = {
    "kepler": (fake_nvml.kepler_k80, "470.256.02"),
    "maxwell": (fake_nvml.geforce_gtx980, "580.65.06"),
    "pascal": (fake_nvml.pascal_p100, "580.65.06"),
    "volta": (fake_nvml.volta_v100, "580.65.06"),
    "ampere": (fake_nvml.ampere_a100, "580.65.06"),
    "hopper": (fake_nvml.hopper_h200, "580.65.06"),
    "blackwell": (fake_nvml.blackwell_b200, "580.65.06"),
}
# None: no profile of that framework runs there (its cells: unsupported).
EXPECTED = {
    "kepler": dict(pytorch=None, tensorflow="tf1", jax=None, mxnet=None,
                   cntk="gpu", caffe="cuda"),
    "maxwell": dict(pytorch=None, tensorflow="tf1", jax="cuda",
                    mxnet="cuda", cntk="gpu", caffe="cuda"),
    "pascal": dict(pytorch=None, tensorflow="cuda", jax="cuda",
                   mxnet="cuda", cntk="gpu", caffe="cuda"),
    "volta": dict(pytorch="cuda", tensorflow="cuda", jax="cuda",
                  mxnet="cuda", cntk="gpu", caffe="nvcaffe"),
    "ampere": dict(pytorch="cuda", tensorflow="cuda", jax="cuda",
                   mxnet="cuda", cntk="gpu", caffe="nvcaffe"),
    "hopper": dict(pytorch="cuda", tensorflow="cuda", jax="cuda",
                   mxnet="ngc", cntk="gpu", caffe="nvcaffe"),
    "blackwell": dict(pytorch="cuda", tensorflow="cuda", jax="cuda",
                      mxnet="ngc", cntk="gpu", caffe="nvcaffe"),
}


def host_gpus(monkeypatch, generation, count=1):
    device, driver = GENERATIONS[generation]
    fake_nvml.configure([device() for _ in range(count)], driver=driver)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    return hostinfo.gpus()


@pytest.mark.parametrize("generation", sorted(GENERATIONS))
def test_each_generation_gets_the_profiles_made_for_it(monkeypatch,
                                                       generation):
    gpus = host_gpus(monkeypatch, generation)
    m = matrix.load()
    chosen = {}
    for framework in FRAMEWORKS:
        choice = gpuprofile.choose(m, framework, gpus)
        chosen[framework] = choice.profile if choice.admitted else None
        assert choice.reason
        if not choice.admitted:
            assert set(choice.refused) == set(
                gpuprofile.gpu_profiles(m, framework))
    assert chosen == EXPECTED[generation]


def test_hostinfo_reads_every_gpu_nvml_shows(monkeypatch):
    gpus = host_gpus(monkeypatch, "ampere", count=2)
    assert [g["compute_capability"] for g in gpus] == ["8.0", "8.0"]
    assert gpus[0]["driver_version"] == "580.65.06"
    fake_nvml.configure([], loaded=False)
    assert hostinfo.gpus() == [] and hostinfo.gpu_count() == 0


def test_a_profile_must_run_on_every_gpu_found(monkeypatch):
    fake_nvml.configure([fake_nvml.volta_v100(), fake_nvml.hopper_h200()])
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml)
    choice = gpuprofile.choose(matrix.load(), "mxnet", hostinfo.gpus())
    # mxnet/cuda runs on the V100 but not on the H200.
    assert choice.profile == "ngc" and "sm_90" in choice.refused["cuda"]


def test_without_gpus_the_first_profile_and_the_reason():
    choice = gpuprofile.choose(matrix.load(), "mxnet", [])
    assert (choice.profile, choice.admitted) == ("cuda", True)
    assert "no GPU is visible here" in choice.reason
    elsewhere = gpuprofile.choose(matrix.load(), "mxnet", [],
                                  "the cells run on Slurm's nodes")
    assert "Slurm" in elsewhere.reason


def test_refused_everywhere_makes_the_cells_unsupported_with_the_reasons(
        monkeypatch):
    gpus = host_gpus(monkeypatch, "kepler")
    host = plan.Host(cpus=2, gpus=1, gpu_devices=tuple(gpus))
    options = plan.Options(frameworks=("pytorch", "tensorflow"),
                           device="gpu", networks=("fcn5",))
    jobs = plan.build(suites.load("smoke"), options, matrix.load(), host)
    by_framework = {job.spec["framework"]: job for job in jobs}
    pytorch, tensorflow = by_framework["pytorch"], by_framework["tensorflow"]
    assert pytorch.skip_reason.startswith("no pytorch GPU profile runs here")
    assert "driver 470.256.02 is older than the 525.60.13" in \
        pytorch.skip_reason
    assert (tensorflow.spec["profile"], tensorflow.skip_reason) == \
        ("tf1", None)
    assert tensorflow.profile_choice["refused"].keys() == {"cuda"}
    # Not part of what the cell measures: the cell's identity is unchanged.
    assert "profile_choice" not in tensorflow.spec


def dry_run(tmp_path, generation):
    device, driver = GENERATIONS[generation]
    env, _state = fake_nvml.child_env(tmp_path, [device()], driver=driver,
                                      path_extra=[ROOT])
    proc = subprocess.run([INVOKE, "bench", "--all", "--device", "gpu",
                           "--dry-run", "--out", str(tmp_path / "results")],
                          cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def chosen_lines(text):
    """{framework: profile} from the dry run's GPU profiles section."""
    section = text.split("GPU profiles (--profile names another):\n", 1)[1]
    section = section.split(" cells:\n", 1)[0]
    return {line.split(":")[0].strip(): line.split(":", 1)[1].split("(")[0]
            .strip() for line in section.splitlines()
            if line.startswith("  ") and not line.startswith("    ")}


@pytest.mark.parametrize("generation", ["hopper", "ampere", "kepler"])
def test_the_dry_run_shows_the_profiles_chosen_and_why(tmp_path, generation):
    out = dry_run(tmp_path, generation)
    expected = {fw: profile or "none"
                for fw, profile in EXPECTED[generation].items()}
    assert chosen_lines(out) == expected
    if generation == "hopper":
        assert "passed over cuda: no machine code for sm_90" in out
        assert "mxnet-ngc-fcn5-gpu" in out
        assert "mxnet-cuda-" not in out
    if generation == "kepler":
        assert "pytorch: none (no pytorch GPU profile runs here" in out
        assert "[unsupported: no pytorch GPU profile runs here" in out


def test_the_result_records_the_choice(monkeypatch, make_cell, tmp_path):
    import json
    from harness.gpu import cell as gpu_cell
    gpus = host_gpus(monkeypatch, "hopper")
    m = matrix.load()
    choice = gpuprofile.choose(m, "mxnet", gpus)
    spec = {"stack": gpuprofile.stack(m["mxnet"]["ngc"]),
            "profile_choice": choice.as_record()}
    cell = make_cell(framework="mxnet", profile="ngc", device="gpu", gpus=1,
                     threads=None)
    cells = gpu_cell.CellGpus(cell, spec, str(tmp_path / "c.json"))
    cells.open()
    result = {"warnings": []}
    assert cells.gate(result) is None
    cells.close(result)
    block = result["compatibility"]
    assert block["profile_choice"]["profile"] == "ngc"
    assert "sm_90" in block["profile_choice"]["refused"]["cuda"]
    import jsonschema
    schema = json.loads((ROOT / "harness" / "result.schema.json").read_text())
    block_schema = jsonschema.Draft7Validator(
        schema["properties"]["compatibility"])
    assert list(block_schema.iter_errors(block)) == []
    block["profile_choice"]["admitted"] = "yes"
    assert list(block_schema.iter_errors(block)) != []
