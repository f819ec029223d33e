"""Then and now: our single-GPU results beside the 2016 figures.

The "then" column is benchmarks/reference/dlbench-2016-raw.json: raw runs
the paper's authors posted from their December 2016 real-data round (K80
and GTX 1080, CUDA 8.0, cuDNN 5.1), not the paper's printed tables. Their
timings included each tool's data pipeline; ours time device-resident
batches. The comparison is labelled accordingly.
"""
import json

from dlrepro import ROOT
from dlrepro.errors import UserError

REFERENCE = ROOT / "benchmarks" / "reference" / "dlbench-2016-raw.json"

# Our framework -> the 2016 tool it continues. PyTorch is not Torch7, but
# Torch7 is the tool the paper timed and PyTorch its successor.
LINEAGE = {"pytorch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet",
           "cntk": "cntk", "caffe": "caffe"}
NOTES = {
    ("cntk", "lstm"): "2016 CNTK counted tokens as samples: ~1/32 of the work",
    ("torch", None): "then: Torch7, PyTorch's predecessor",
}


def load_reference(path=REFERENCE):
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read the 2016 reference {path}: {exc}")
    return [r for r in data["records"] if r["seconds_per_minibatch"]]


def rows(job_results, reference):
    """One row per (our ok single-GPU result, matching 2016 record)."""
    out = []
    for _entry, result in job_results:
        if result is None or result["status"] != "ok":
            continue
        cell = result["cell"]
        if cell["device"] != "gpu" or cell["gpus"] > 1:
            continue
        now = result["timing"]["mean_s"]
        gpu_names = [g.get("name") for g in result["environment"]["gpus"]]
        tool = LINEAGE.get(cell["framework"])
        if tool is None:  # JAX: no 2016 tool to compare with
            continue
        for ref in reference:
            if (ref["tool"], ref["network"], ref["batch_size"]) != (
                    tool, cell["network"], cell["global_batch_size"]):
                continue
            note = NOTES.get((tool, cell["network"])) or NOTES.get((tool, None))
            out.append({
                "network": cell["network"], "batch": cell["global_batch_size"],
                "framework": cell["framework"], "now_s": now,
                "now_gpu": ", ".join(n for n in gpu_names if n) or "?",
                "then_tool": ref["tool"], "then_gpu": ref["gpu"],
                "then_s": ref["seconds_per_minibatch"],
                "speedup": ref["seconds_per_minibatch"] / now,
                "note": note or "",
            })
    return out


# Networks of today with no counterpart in 2016 (by the name before any
# @STEPS): their rows say so instead of comparing.
WITHOUT_2016 = {"gpt-small": "the 2016 round measured no transformer",
                "gpt-tiny": "the 2016 round measured no transformer"}


def no_reference_rows(job_results):
    """One row per ok single-GPU result of a network 2016 had none of
    (WITHOUT_2016): its now figures, the 2016 ones empty, the reason."""
    out = []
    for _entry, result in job_results:
        if result is None or result["status"] != "ok":
            continue
        cell = result["cell"]
        why = WITHOUT_2016.get(cell["network"].split("@")[0])
        if why is None or cell["device"] != "gpu" or cell["gpus"] > 1:
            continue
        gpu_names = [g.get("name") for g in result["environment"]["gpus"]]
        out.append({
            "network": cell["network"], "batch": cell["global_batch_size"],
            "framework": cell["framework"],
            "now_s": result["timing"]["mean_s"],
            "now_gpu": ", ".join(n for n in gpu_names if n) or "?",
            "then_tool": "-", "then_gpu": "-", "then_s": None,
            "speedup": None, "note": why})
    return out


def compared(table):
    """The rows of `table` that have a 2016 figure."""
    return [r for r in table if r["then_s"] is not None]


def format_rows(table):
    """`table`: rows() and no_reference_rows() together."""
    without = [r for r in table if r["then_s"] is None]
    table = compared(table)
    lines = _format_compared(table)
    for r in without:
        lines.append(f"{r['network']} b{r['batch']} {r['framework']}: "
                     f"{r['now_s']:.5f} s/batch now on {r['now_gpu']}; no "
                     f"2016 figure: {r['note']}")
    return lines


def _format_compared(table):
    if not table:
        return ["no result in this run matches the 2016 reference: it has "
                "single-GPU real-data runs of fcn-r, alexnet-r, resnet-56 and "
                "lstm at the paper's batch sizes; run `invoke bench --all "
                "--suite paper-real-gpu` on a GPU host"]
    lines = ["network    batch  framework   now s/batch  now GPU            "
             "2016 tool   2016 GPU                 2016 s/batch  then/now  note"]
    for r in table:
        lines.append(
            f"{r['network']:<10} {r['batch']:>5}  {r['framework']:<10} "
            f"{r['now_s']:>12.5f}  {r['now_gpu'][:18]:<18} {r['then_tool']:<11} "
            f"{r['then_gpu'][:24]:<24} {r['then_s']:>12.5f}  "
            f"{r['speedup']:>7.1f}x  {r['note']}")
    lines.append("2016 figures: raw runs posted by the paper's authors (dlbench, "
                 "Dec 2016), data pipeline included; now: device-resident "
                 "batches.")
    return lines
