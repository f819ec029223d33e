"""Peak FLOP/s table and MFU arithmetic (harness/gpu/peaks.py)."""
import pytest

from harness.gpu import peaks

REQUIRED = ("k80", "gtx980", "gtx1080", "p100-sxm2", "v100-sxm2", "t4",
            "a100", "l4", "h100-sxm", "h100-pcie", "h200", "b200")


def test_every_gpu_of_the_issue_is_in_the_table():
    assert set(REQUIRED) <= set(peaks.BY_KEY)


@pytest.mark.parametrize("gpu", peaks.GPUS, ids=[g.key for g in peaks.GPUS])
def test_fp32_datasheet_figure_is_lanes_x_2_x_clock(gpu):
    flops, mhz = gpu.peaks["fp32"]
    assert flops == pytest.approx(gpu.fp32_lanes * 2 * mhz * 1e6, rel=0.015)
    assert mhz == gpu.boost_mhz


@pytest.mark.parametrize("key,precision,per_sm_per_clock", [
    ("a100", "tf32", 1024), ("a100", "bf16", 2048),
    ("h100-sxm", "tf32", 2048), ("h100-sxm", "bf16", 4096),
    ("h100-pcie", "bf16", 4096), ("h200", "fp16", 4096),
    ("l4", "tf32", 512), ("l4", "bf16", 1024),
    ("b200", "tf32", 4096), ("b200", "bf16", 8192),
    ("v100-sxm2", "fp16", 1024), ("t4", "fp16", 1024),
])
def test_tensor_figures_match_per_sm_rates(key, precision, per_sm_per_clock):
    gpu = peaks.BY_KEY[key]
    # 3%: datasheets round (B200's TF32 is printed as 2.2 PF sparse where
    # half its BF16 rate gives 2.25).
    assert peaks.per_clock(gpu, precision) == pytest.approx(
        gpu.sms * per_sm_per_clock, rel=0.03)


def test_peak_rescales_linearly_with_the_clock():
    k80 = peaks.BY_KEY["k80"]
    at_boost = peaks.peak(k80, "fp32")
    at_base = peaks.peak(k80, "fp32", 562)
    assert at_boost == pytest.approx(4.37e12)
    assert at_base == pytest.approx(at_boost * 562 / 875)
    assert at_base == pytest.approx(2496 * 2 * 562e6, rel=0.002)


@pytest.mark.parametrize("name,key", [
    ("Tesla K80", "k80"), ("GeForce GTX 980", "gtx980"),
    ("NVIDIA GeForce GTX 1080", "gtx1080"), ("GeForce GTX 1080 Ti", None),
    ("Tesla P100-SXM2-16GB", "p100-sxm2"), ("Tesla P100-PCIE-16GB", "p100-pcie"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2"), ("Tesla V100-PCIE-16GB", "v100-pcie"),
    ("Tesla T4", "t4"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100 80GB PCIe", "a100"), ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", None), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H100 NVL", None),
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", None),
    ("NVIDIA B200", "b200"), ("", None), (None, None),
])
def test_nvml_names_map_to_entries(name, key):
    entry = peaks.find(name)
    assert (entry.key if entry else None) == key


def test_mfu_against_the_measured_clock():
    block = peaks.mfu(flops_per_iteration=2.0e12, mean_s=0.1,
                      gpu_names=["NVIDIA H200"], clocks_mhz=[1755.0],
                      math_mode={"matmul": "fp32", "conv": "tf32"},
                      convolution=False)
    per_clock = 66.9e12 / 1980e6
    assert block["precision"] == "fp32"
    assert block["achieved_flops_per_s"] == pytest.approx(2.0e13)
    assert block["peak_flops_per_s"] == pytest.approx(per_clock * 1755e6)
    assert block["value"] == pytest.approx(2.0e13 / (per_clock * 1755e6))
    assert block["value_at_datasheet_clock"] == pytest.approx(2.0e13 / 66.9e12)
    assert block["clock_source"].startswith("telemetry")


def test_mfu_uses_tf32_peak_when_convolutions_may_use_tf32():
    block = peaks.mfu(1e12, 0.01, ["NVIDIA A100-SXM4-40GB"], [1410.0],
                      {"matmul": "fp32", "conv": "tf32"}, convolution=True)
    assert block["precision"] == "tf32"
    assert block["peak_flops_per_s"] == pytest.approx(156e12)
    assert block["value"] == pytest.approx(1e14 / 156e12)


def test_tf32_allowed_on_a_gpu_without_tf32_is_fp32():
    precision, note = peaks.precision_for(peaks.BY_KEY["v100-sxm2"],
                                          {"conv": "tf32"}, True)
    assert precision == "fp32" and "no TF32" in note


def test_mfu_without_telemetry_uses_the_datasheet_clock():
    block = peaks.mfu(1e12, 1.0, ["Tesla T4"], [], None, False)
    assert block["clock_mhz"] == 1590
    assert block["value"] == pytest.approx(1e12 / 8.1e12)
    assert "FP32 assumed" in block["note"]


def test_mfu_of_two_gpus_uses_both_peaks():
    block = peaks.mfu(1e12, 1.0, ["Tesla T4", "Tesla T4"], [1590.0, 795.0],
                      None, False)
    assert block["peak_flops_per_s"] == pytest.approx(8.1e12 * 1.5)


def test_unknown_gpu_has_no_mfu_but_says_why():
    block = peaks.mfu(1e12, 1.0, ["NVIDIA RTX PRO 6000"], [2000.0], None,
                      False)
    assert block["value"] is None
    assert "NVIDIA RTX PRO 6000" in block["note"]


def test_cpu_cells_have_no_mfu():
    assert peaks.mfu(1e12, 1.0, [], [], None, False) is None
