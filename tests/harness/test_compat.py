"""The compatibility gate (harness/gpu/compat.py): a table of stacks x GPUs."""
import pytest

from harness.gpu import compat
from harness.errors import HarnessError

MXNET_CU112 = {"sass": ["sm_50", "sm_52", "sm_60", "sm_61", "sm_70", "sm_75",
                        "sm_80", "sm_86"], "ptx": "", "min_driver": "460.27.03",
               "cuda": "11.2"}
TF_221 = {"sass": ["sm_60", "sm_70", "sm_80", "sm_89", "sm_90"],
          "ptx": "compute_90", "min_driver": "525.60.13", "cuda": "12.5"}
TORCH_CU130 = {"sass": ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100",
                        "sm_120"], "ptx": "compute_120",
               "min_driver": "580.65.06", "cuda": "13.0"}
PTX_ONLY_80 = {"sass": ["sm_70"], "ptx": "compute_80", "min_driver": "",
               "cuda": "12.8"}
HOPPER_A = {"sass": ["sm_90a"], "ptx": "", "min_driver": "", "cuda": "12.4"}
BLACKWELL_F = {"sass": ["sm_100f"], "ptx": "", "min_driver": "",
               "cuda": "12.9"}
CPU_BUILD = {"sass": [], "ptx": "", "min_driver": "", "cuda": ""}

CASES = [
    # (id, capability, driver, stack, verdict, runs_as)
    ("mxnet-cu112-on-h200", "9.0", "580.65.06", MXNET_CU112,
     compat.UNSUPPORTED, None),
    ("mxnet-cu112-on-a100", "8.0", "580.65.06", MXNET_CU112, compat.NATIVE,
     "sm_80"),
    ("mxnet-cu112-on-a10-sm86", "8.6", "580.65.06", MXNET_CU112,
     compat.NATIVE, "sm_86"),
    ("mxnet-cu112-on-l4-sm89", "8.9", "580.65.06", MXNET_CU112,
     compat.NATIVE, "sm_86"),
    ("mxnet-cu112-on-k80", "3.7", "470.239.06", MXNET_CU112,
     compat.UNSUPPORTED, None),
    ("mxnet-cu112-driver-too-old", "8.0", "450.80.02", MXNET_CU112,
     compat.DRIVER_TOO_OLD, None),
    ("tf221-on-h200", "9.0", "580.65.06", TF_221, compat.NATIVE, "sm_90"),
    ("tf221-on-b200-through-ptx", "10.0", "580.65.06", TF_221,
     compat.PTX_JIT, "compute_90"),
    ("tf221-on-t4-sm75-uses-sm70", "7.5", "580.65.06", TF_221,
     compat.NATIVE, "sm_70"),
    ("torch-cu130-on-v100", "7.0", "580.65.06", TORCH_CU130,
     compat.UNSUPPORTED, None),
    ("torch-cu130-driver-575", "9.0", "575.57.08", TORCH_CU130,
     compat.DRIVER_TOO_OLD, None),
    ("torch-cu130-on-h200", "9.0", "580.95.05", TORCH_CU130, compat.NATIVE,
     "sm_90"),
    ("ptx-compute80-on-sm86", "8.6", "570.86.10", PTX_ONLY_80,
     compat.PTX_JIT, "compute_80"),
    ("ptx-compute80-not-on-sm75", "7.5", "570.86.10", PTX_ONLY_80,
     compat.NATIVE, "sm_70"),
    ("sm90a-on-h100", "9.0", "", HOPPER_A, compat.NATIVE, "sm_90a"),
    ("sm90a-not-on-sm100", "10.0", "", HOPPER_A, compat.UNSUPPORTED, None),
    ("sm100f-on-sm103", "10.3", "", BLACKWELL_F, compat.NATIVE, "sm_100f"),
    ("sm100f-not-on-sm120", "12.0", "", BLACKWELL_F, compat.UNSUPPORTED,
     None),
    ("cpu-build-on-gpu", "9.0", "580.65.06", CPU_BUILD, compat.UNSUPPORTED,
     None),
    ("no-stack", "9.0", "580.65.06", None, compat.UNKNOWN, None),
    ("no-nvml", None, None, TF_221, compat.UNKNOWN, None),
]


@pytest.mark.parametrize("capability,driver,stack,verdict,runs_as",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gate_table(capability, driver, stack, verdict, runs_as):
    result = compat.check(capability, driver or None, stack)
    assert result["verdict"] == verdict, result["reason"]
    assert result["runs_as"] == runs_as
    assert result["reason"]


def test_unsupported_reason_names_device_and_kernels():
    result = compat.check((9, 0), "580.65.06", MXNET_CU112)
    assert result["verdict"] in compat.BLOCKING
    assert "sm_90" in result["reason"] and "sm_86" in result["reason"]
    assert "no PTX" in result["reason"] or "has none" in result["reason"]


def test_driver_too_old_names_both_versions():
    result = compat.check("9.0", "575.57.08", TORCH_CU130)
    assert "575.57.08" in result["reason"] and "580.65.06" in result["reason"]


def test_ptx_from_newer_toolkit_than_driver_warns():
    stack = {"sass": [], "ptx": "compute_80", "min_driver": "525.60.13",
             "cuda": "12.8"}
    result = compat.check("8.6", "535.129.03", stack)
    assert result["verdict"] == compat.PTX_JIT
    assert any("570.26" in w for w in result["warnings"])
    assert not compat.check("8.6", "570.133.07", stack)["warnings"]


def test_sass_rules():
    sm80 = compat.parse_arch("sm_80")
    assert compat.sass_runs(sm80, (8, 6))
    assert not compat.sass_runs(sm80, (9, 0))
    assert not compat.sass_runs(compat.parse_arch("sm_86"), (8, 0))
    assert compat.ptx_runs(compat.parse_arch("compute_80"), (9, 0))
    assert not compat.ptx_runs(compat.parse_arch("compute_90"), (8, 9))
    assert not compat.ptx_runs(compat.parse_arch("compute_90a"), (10, 0))


@pytest.mark.parametrize("stack,message", [
    ("sm_80", "must be an object"),
    ({"sass": "sm_80"}, "must be a list"),
    ({"sass": ["compute_80"]}, "machine code"),
    ({"sass": ["sm80"]}, "look like sm_86"),
    ({"ptx": "sm_80"}, "virtual architecture"),
    ({"ptx": 80}, "must be a string"),
    ({"min_driver": 525}, "min_driver must be a string"),
], ids=["not-object", "sass-string", "ptx-in-sass", "bad-arch", "sm-as-ptx",
        "ptx-number", "driver-number"])
def test_bad_stacks_are_harness_errors(stack, message):
    with pytest.raises(HarnessError, match=message):
        compat.check_stack(stack)


@pytest.mark.parametrize("value,expected", [
    ("9.0", (9, 0)), ((8, 6), (8, 6)), ([10, 3], (10, 3))])
def test_parse_capability(value, expected):
    assert compat.parse_capability(value) == expected


def test_parse_capability_rejects_garbage():
    with pytest.raises(HarnessError):
        compat.parse_capability("nine")


def test_versions_compare_numerically():
    assert compat.parse_version("580.65.06") > compat.parse_version("580.9.1")
    assert compat.parse_version("") is None
    assert compat.parse_version("r580") is None
