"""Peak FLOP/s of known GPUs and model FLOPs utilisation (MFU).

A peak is units x FLOPs per unit per clock x clock. Datasheets quote it at
one clock (the boost clock for CUDA cores; Hopper and Blackwell quote tensor
figures at a lower "tensor" clock), so the table keeps each figure with the
clock it assumes; `per_clock` divides one by the other, and `peak` rescales
to the SM clock that telemetry measured during the timed window. FP32 peaks
are CUDA cores x 2 (one fused multiply-add) x clock; tests check that the
datasheet figures agree with that formula.

Tensor figures are dense (NVIDIA quotes Ampere and newer "with sparsity",
twice the dense rate; the table holds half of that). Sources, by entry:
- K80: NVIDIA's launch specification (AnandTech, "NVIDIA Launches Tesla K80,
  GK210 GPU", 2014): 2 x 2496 cores, 562 MHz base, 875 MHz boost, 8.74
  TFLOPS FP32 per board with boost. One entry is one GK210 chip (what NVML
  and CUDA see as one device): half the board.
- GTX 980: NVIDIA reference specification (PC Gamer / Fudzilla launch
  coverage, 2014): 2048 cores, 1126 MHz base, 1216 MHz boost.
- GTX 1080: NVIDIA reference specification: 2560 cores, 1607 / 1733 MHz,
  8.9 TFLOPS.
- P100: NVIDIA Tesla P100 datasheet: SXM2 10.6 TFLOPS FP32, 21.2 FP16 at
  1480 MHz boost (1328 base); PCIe 9.3 / 18.7 at its 1303 MHz boost.
- V100: NVIDIA Tesla V100 datasheet: SXM2 15.7 TFLOPS FP32, 125 tensor at
  1530 MHz; PCIe 14 / 112 at 1380 MHz (1245 base).
- T4: NVIDIA T4 datasheet: 8.1 TFLOPS FP32, 65 FP16 tensor; 2560 cores,
  40 SMs, 585 MHz base, 1590 MHz boost.
- A100: NVIDIA A100 datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4):
  19.5 FP32, 156 TF32, 312 BF16/FP16 tensor (dense); 6912 cores, 108 SMs,
  1410 MHz boost, 1095 MHz base (SXM4). SXM4 and PCIe quote the same peaks.
- L4: NVIDIA L4 datasheet: 30.3 TFLOPS FP32, 120 TF32 and 242 BF16/FP16
  tensor with sparsity; 58 SMs x 128 = 7424 cores, 795 / 2040 MHz.
- H100: NVIDIA H100 datasheet: SXM 67 FP32, 989 TF32 and 1979 BF16/FP16
  with sparsity; PCIe 51 / 756 / 1513. 132 (114) SMs, 128 FP32 lanes each.
  FP32 at 1980 (1755) MHz, tensor at 1830 (1620) MHz: the figures only agree
  with the per-SM rates at those clocks (G. Lockwood's H100 notes list
  1.83 GHz low precision, 1.98 GHz high precision). Base clocks 1590 / 1125
  MHz are TechPowerUp's figures, not NVIDIA's.
- H200: NVIDIA H200 datasheet: the H100 SXM's GH100 with HBM3e; same peaks
  (67 FP32, 989 TF32 and 1979 BF16 with sparsity).
- B200: NVIDIA HGX B200 specification (one GPU): 75 TFLOPS FP32, 2.2 PF TF32
  (rounded: half the BF16 rate is 2.25) and 4.5 PF BF16/FP16 with sparsity;
  148 SMs x 128 lanes. Clocks 1980 MHz
  (FP32) and 1860 MHz (tensor) are third-party figures (hmc-tech.com) that
  match the datasheet rates; NVIDIA publishes none.
"""
import re
from collections import namedtuple

# peaks: {precision: (FLOP/s as the datasheet quotes it, clock in MHz the
# figure assumes)}. Precisions: fp32 (CUDA cores), tf32, bf16, fp16 (tensor
# cores; P100's fp16 is its packed-FP16 CUDA-core rate).
Gpu = namedtuple("Gpu", "key label pattern sms fp32_lanes base_mhz boost_mhz "
                        "peaks")

T = 1e12

GPUS = (
    Gpu("k80", "Tesla K80 (one GK210)", r"\bK80\b", 13, 2496, 562, 875,
        {"fp32": (8.74 * T / 2, 875)}),
    Gpu("gtx980", "GeForce GTX 980", r"GTX 980$", 16, 2048, 1126, 1216,
        {"fp32": (2048 * 2 * 1216e6, 1216)}),
    Gpu("gtx1080", "GeForce GTX 1080", r"GTX 1080$", 20, 2560, 1607, 1733,
        {"fp32": (8.873 * T, 1733)}),
    Gpu("p100-sxm2", "Tesla P100 SXM2", r"P100-SXM2", 56, 3584, 1328, 1480,
        {"fp32": (10.6 * T, 1480), "fp16": (21.2 * T, 1480)}),
    Gpu("p100-pcie", "Tesla P100 PCIe", r"P100-PCIE", 56, 3584, None, 1303,
        {"fp32": (9.3 * T, 1303), "fp16": (18.7 * T, 1303)}),
    Gpu("v100-sxm2", "Tesla V100 SXM2", r"V100-SXM2", 80, 5120, None, 1530,
        {"fp32": (15.7 * T, 1530), "fp16": (125 * T, 1530)}),
    Gpu("v100-pcie", "Tesla V100 PCIe", r"V100-PCIE", 80, 5120, 1245, 1380,
        {"fp32": (14 * T, 1380), "fp16": (112 * T, 1380)}),
    Gpu("t4", "Tesla T4", r"\bT4\b", 40, 2560, 585, 1590,
        {"fp32": (8.1 * T, 1590), "fp16": (65 * T, 1590)}),
    Gpu("a100", "A100 (SXM4 or PCIe)", r"\bA100\b", 108, 6912, 1095, 1410,
        {"fp32": (19.5 * T, 1410), "tf32": (156 * T, 1410),
         "bf16": (312 * T, 1410), "fp16": (312 * T, 1410)}),
    Gpu("l4", "L4", r"\bL4$", 58, 7424, 795, 2040,
        {"fp32": (30.3 * T, 2040), "tf32": (120 * T / 2, 2040),
         "bf16": (242 * T / 2, 2040), "fp16": (242 * T / 2, 2040)}),
    # NVML names the SXM part "NVIDIA H100 80GB HBM3"; the NVL part (other
    # clocks) is deliberately not matched.
    Gpu("h100-sxm", "H100 SXM", r"H100 (80GB HBM3|SXM)", 132, 16896, 1590,
        1980, {"fp32": (66.9 * T, 1980), "tf32": (989.4 * T / 2, 1830),
               "bf16": (1978.9 * T / 2, 1830),
               "fp16": (1978.9 * T / 2, 1830)}),
    Gpu("h100-pcie", "H100 PCIe", r"H100 PCIe", 114, 14592, 1125, 1755,
        {"fp32": (51.2 * T, 1755), "tf32": (756 * T / 2, 1620),
         "bf16": (1513 * T / 2, 1620), "fp16": (1513 * T / 2, 1620)}),
    Gpu("h200", "H200 SXM", r"H200$", 132, 16896, None, 1980,
        {"fp32": (66.9 * T, 1980), "tf32": (989.4 * T / 2, 1830),
         "bf16": (1978.9 * T / 2, 1830), "fp16": (1978.9 * T / 2, 1830)}),
    Gpu("b200", "B200", r"\bB200\b", 148, 18944, None, 1980,
        {"fp32": (75 * T, 1980), "tf32": (2.2e15 / 2, 1860),
         "bf16": (4.5e15 / 2, 1860), "fp16": (4.5e15 / 2, 1860)}),
)

BY_KEY = dict((g.key, g) for g in GPUS)


def find(name):
    """The table entry for an NVML device name, or None."""
    if not name:
        return None
    for gpu in GPUS:
        if re.search(gpu.pattern, name, re.IGNORECASE):
            return gpu
    return None


def per_clock(gpu, precision):
    """FLOPs per clock cycle of the whole GPU at `precision`."""
    flops, mhz = gpu.peaks[precision]
    return flops / (mhz * 1e6)


def peak(gpu, precision, clock_mhz=None):
    """Peak FLOP/s at `clock_mhz` (the datasheet's own clock when None)."""
    flops, mhz = gpu.peaks[precision]
    if clock_mhz is None:
        return flops
    return per_clock(gpu, precision) * clock_mhz * 1e6


def precision_for(gpu, math_mode, convolution, autocast=None):
    """Which peak applies: a mixed-precision run's (`autocast` "bf16" or
    "fp16") when the GPU has tensor cores for it; for an FP32 run `tf32`
    when the framework lets tensor cores run the network's dominant
    operation (convolutions for convolutional networks, matrix products
    otherwise) as TF32 and the GPU has TF32, else `fp32`. Returns
    (precision, note)."""
    if autocast is not None:
        if autocast in gpu.peaks:
            return autocast, ("automatic mixed precision: {} tensor-core "
                              "peak".format(autocast))
        return "fp32", ("{} autocast, but this table has no {} peak for the "
                        "GPU: FP32 peak".format(autocast, autocast))
    op = "conv" if convolution else "matmul"
    mode = (math_mode or {}).get(op)
    if mode is None:
        return "fp32", ("the backend does not report whether it allows TF32; "
                        "FP32 assumed")
    if mode == "tf32" and "tf32" in gpu.peaks:
        return "tf32", ("the framework allows TF32 tensor cores for FP32 "
                        "{}".format("convolutions" if convolution
                                    else "matrix products"))
    if mode == "tf32":
        return "fp32", "TF32 allowed, but this GPU has no TF32 tensor cores"
    return "fp32", "FP32 {} (TF32 off)".format(
        "convolutions" if convolution else "matrix products")


def mfu(flops_per_iteration, mean_s, gpu_names, clocks_mhz, math_mode,
        convolution, autocast=None):
    """The `model.mfu` block: achieved FLOP/s against the peak of the GPUs
    the cell used, at the SM clock measured during the timed window (each
    GPU's mean; None where telemetry had none: the datasheet clock then).
    `flops_per_iteration`: the executed count (harness.networks), so that
    a gradient no framework computes is not credited as work done."""
    if not gpu_names:
        return None
    block = {"value": None, "precision": None, "achieved_flops_per_s": None,
             "peak_flops_per_s": None, "clock_mhz": None,
             "clock_source": None, "datasheet_peak_flops_per_s": None,
             "value_at_datasheet_clock": None, "gpu": None, "note": None}
    entries = [find(name) for name in gpu_names]
    unknown = [n for n, e in zip(gpu_names, entries) if e is None]
    if unknown:
        block["note"] = ("no peak FLOP/s for {} in harness/gpu/peaks.py"
                         .format(", ".join(sorted(set(unknown)))))
        return block
    if len(set(e.key for e in entries)) > 1:
        block["note"] = "mixed GPU models; MFU not computed"
        return block
    gpu = entries[0]
    precision, note = precision_for(gpu, math_mode, convolution, autocast)
    clocks = [c for c in (clocks_mhz or []) if c]
    measured = len(clocks) == len(entries)
    total_peak = 0.0
    for index in range(len(entries)):
        clock = clocks[index] if measured else None
        total_peak += peak(gpu, precision, clock)
    datasheet = peak(gpu, precision) * len(entries)
    block.update(precision=precision, gpu=gpu.label, note=note,
                 peak_flops_per_s=total_peak,
                 datasheet_peak_flops_per_s=datasheet,
                 clock_mhz=(sum(clocks) / len(clocks) if measured
                            else gpu.peaks[precision][1]),
                 clock_source=("telemetry: mean SM clock of the timed window"
                               if measured else
                               "datasheet clock (no telemetry)"))
    if flops_per_iteration and mean_s:
        achieved = flops_per_iteration / mean_s
        block["achieved_flops_per_s"] = achieved
        block["value"] = achieved / total_peak
        block["value_at_datasheet_clock"] = achieved / datasheet
    return block
