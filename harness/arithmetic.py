"""What a throughput cell computed in and how it was compiled: the result's
`precision` and `compilation` blocks. Pure: the backend's reports in,
dicts out (harness.frameworks describes what backends report).
"""
from .errors import HarnessError

MIXED = ("bf16", "fp16")
# A last warm-up iteration slower than this many median iterations: the
# compilation (or autotuning) may not have finished inside the warm-up.
SLOW_WARMUP = 2.0


def resolved(math_mode):
    """One name for the math of FP32 layers: "fp32" or "tf32" when matrix
    products and convolutions agree, else e.g. "tf32 conv, fp32 matmul";
    None when the backend does not say."""
    if not math_mode:
        return None
    matmul, conv = math_mode.get("matmul"), math_mode.get("conv")
    if matmul == conv:
        return matmul
    return "{} conv, {} matmul".format(conv, matmul)


def precision_block(requested, device, math_mode, loss_scaling=None,
                    backend_note=None):
    """The `precision` block. `math_mode`: the backend's math_mode(device)
    after prepare (None when it has none); `loss_scaling`: how the backend
    scales fp16 losses (None for no scaling); `backend_note`: what the
    backend adds about the arithmetic (its session's `precision_note`),
    appended to the note. Strict fp32 that the backend
    reports as anything else is an error: the cell would not measure what
    it says."""
    if math_mode is None and device == "cpu":
        # No CPU framework here runs FP32 layers in a reduced format unasked.
        math_mode = {"matmul": "fp32", "conv": "fp32"}
    if requested == "fp32" and math_mode is not None and \
            resolved(math_mode) != "fp32":
        raise HarnessError("strict fp32 asked, but the framework reports "
                           "{}".format(math_mode))
    if requested in MIXED:
        name = requested
        note = ("automatic mixed precision: {} compute, FP32 weights{}".format(
            requested, "" if requested == "bf16" else " and loss scaling"))
    else:
        name = resolved(math_mode)
        note = (None if name is not None else
                "the backend does not report its math mode")
    if backend_note:
        note = "{}; {}".format(note, backend_note) if note else backend_note
    return {"requested": requested, "resolved": name,
            "math_mode": math_mode,
            "autocast": requested if requested in MIXED else None,
            "loss_scaling": loss_scaling, "note": note}


def compilation_block(requested, mode, warmup_s, median_s):
    """The `compilation` block: the mode asked (None: the framework's
    default) and run, and how long the first iterations took. Compilation
    runs inside the warm-up; `first_iteration_excess_s` is the first
    iteration's time above a steady (median timed) one."""
    first = warmup_s[0] if warmup_s else None
    excess = (first - median_s if first is not None and median_s is not None
              else None)
    return {"requested": requested, "mode": mode,
            "warmup_s": list(warmup_s),
            "first_iteration_s": first,
            "first_iteration_excess_s": excess}


def warnings_for(block, median_s):
    """A warning when the warm-up may not have covered compilation."""
    warmup = block["warmup_s"]
    if len(warmup) < 2 or not median_s or block["mode"] == "none":
        return []
    if warmup[-1] > SLOW_WARMUP * median_s:
        return ["the last warm-up iteration took {:.1f}x the median: "
                "compilation or autotuning may not have finished before the "
                "timed iterations (give more --warmup)".format(
                    warmup[-1] / median_s)]
    return []
