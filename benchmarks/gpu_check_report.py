"""The report of benchmarks/gpu_check.py: the machine, the compatibility
gate's verdicts, one row per cell and each cell's details, as text lines.
"""
import sys


def report_lines(machine, device, notes, stacks, matrix_reason, gate, cells):
    """The report; `machine` is (gpus, nvml_reason, torch, torch_error)."""
    gpus, nvml_reason, torch, torch_error = machine
    lines = format_inventory(gpus, nvml_reason, torch, torch_error, device,
                             notes)
    if not gpus:
        lines += ["== compatibility gate", "  not evaluated: no GPU "
                  "({}); matrix GPU profiles: {}".format(
                      nvml_reason, ", ".join(sorted(stacks)) or
                      matrix_reason or "none")]
    for title, table in sorted(gate.items()):
        lines += format_verdicts(title, table, matrix_reason)
    return lines + format_cells(cells) + format_details(cells)


def _fmt(value, pattern, missing="-"):
    return pattern.format(value) if value is not None else missing


def format_inventory(gpus, reason, torch, torch_error, device, notes):
    lines = ["== machine"]
    lines.append("python {} ({})".format(sys.version.split()[0],
                                         sys.executable))
    if torch:
        lines.append("torch {} (CUDA {}), cuda available: {}, arch list: "
                     "{}".format(torch["version"], torch["cuda"],
                                 torch["cuda_available"],
                                 " ".join(torch["arch_list"]) or "-"))
    else:
        lines.append("torch: not importable ({})".format(torch_error))
    if not gpus:
        lines.append("GPUs: none seen by NVML ({})".format(reason))
    for gpu in gpus:
        lines.append(
            "GPU {index}: {name}, sm_{cc}, {mem} GiB, driver {driver} (CUDA "
            "{cuda}), max SM {sm} MHz, power limit {power} W, uuid {uuid}"
            .format(index=gpu["index"], name=gpu["name"],
                    cc=(gpu["compute_capability"] or "?").replace(".", ""),
                    mem=_fmt(gpu["memory_total_bytes"] and
                             gpu["memory_total_bytes"] / 2.0 ** 30, "{:.0f}"),
                    driver=gpu["driver_version"],
                    cuda=gpu["cuda_driver_version"],
                    sm=gpu["max_sm_clock_mhz"],
                    power=_fmt(gpu["power_limit_w"], "{:.0f}"),
                    uuid=gpu["uuid"]))
    lines.append("cells run on: {}".format(device))
    lines.extend("NOTE: " + n for n in notes)
    return lines


def format_verdicts(title, table, reason):
    lines = ["== compatibility gate: " + title]
    if reason:
        lines.append("  " + reason)
    for name, verdict in sorted(table.items()):
        lines.append("  {:<28} {:<15} {}".format(name, verdict["verdict"],
                                                 verdict["reason"]))
        lines.extend("  {:<28} {:<15} warning: {}".format("", "", w)
                     for w in verdict["warnings"])
    return lines


def format_cells(cells):
    lines = ["== cells",
             "{:<26} {:<12} {:>9} {:>9} {:>6} {:>10} {:>7} {:>7} {:>6} "
             "{:>12} {}".format("cell", "status", "mean ms", "median", "cv",
                                "samples/s", "SM MHz", "power W", "temp",
                                "MFU", "flags")]
    for cell in cells:
        result = cell["result"] or {}
        timing = result.get("timing") or {}
        tele = (result.get("telemetry") or {}).get("gpus") or [{}]
        mfu = (result.get("model") or {}).get("mfu") or {}
        flags = [k for k, v in ((result.get("telemetry") or {})
                                .get("flags") or {}).items() if v]
        lines.append("{:<26} {:<12} {:>9} {:>9} {:>6} {:>10} {:>7} {:>7} "
                     "{:>6} {:>12} {}".format(
                         cell["id"], result.get("status") or (
                             "skipped" if cell["exit"] == "skipped"
                             else "no result"),
                         _fmt(timing.get("mean_s") and
                              timing["mean_s"] * 1e3, "{:.2f}"),
                         _fmt(timing.get("median_s") and
                              timing["median_s"] * 1e3, "{:.2f}"),
                         _fmt(timing.get("cv"), "{:.1%}"),
                         _fmt(timing.get("samples_per_s"), "{:.0f}"),
                         _fmt((tele[0].get("sm_clock_mhz") or {}).get("mean"),
                              "{:.0f}"),
                         _fmt((tele[0].get("power_w") or {}).get("mean"),
                              "{:.0f}"),
                         _fmt((tele[0].get("temperature_c") or {}).get("max"),
                              "{:.0f}C"),
                         _fmt(mfu.get("value"), "{:.1%}") +
                         (" " + mfu["precision"] if mfu.get("precision")
                          else ""),
                         ",".join(flags) or "-"))
    return lines


def format_details(cells):
    """Per cell: its exit, and what its result says beyond the table."""
    lines = ["== per cell"]
    for cell in cells:
        result = cell["result"]
        lines.append("-- {} (exit {}, {:.0f} s wall)".format(
            cell["id"], cell["exit"], cell["wall_s"]))
        if result is None:
            lines.extend("   | " + l for l in cell["log_tail"])
            continue
        if result.get("error"):
            lines.append("   error: {}: {}".format(result["error"]["type"],
                                                   result["error"]["message"]))
        lines += _timing_details(result.get("timing") or {})
        gate = result.get("compatibility")
        if gate:
            lines.append("   gate: {} ({})".format(gate["verdict"],
                                                   gate["reason"]))
        lines += _clock_details(result.get("gpu_clocks") or {})
        env = result.get("environment") or {}
        lines.append("   framework {} CUDA {} cuDNN {} NCCL {}".format(
            env.get("framework_version"), env.get("cuda"), env.get("cudnn"),
            env.get("nccl")))
        lines += _telemetry_details(result.get("telemetry") or {})
        lines += _mfu_details((result.get("model") or {}).get("mfu"))
        lines.extend("   warning: " + w for w in result.get("warnings", []))
    return lines


def _timing_details(timing):
    if not timing.get("per_iteration_s"):
        return []
    return ["   iteration ms: min {:.2f} p05 {:.2f} median {:.2f} p95 {:.2f} "
            "max {:.2f}; warm-up first {:.1f}".format(
                *[timing[k] * 1e3 for k in
                  ("min_s", "p05_s", "median_s", "p95_s", "max_s")] +
                [(timing.get("warmup_s") or [0])[0] * 1e3])]


def _clock_details(gpu_clocks):
    lines = []
    for record in gpu_clocks.get("gpus", []):
        original = record.get("original") or {}
        lines.append("   clocks GPU {}: application {}, default {}, max {},"
                     " autoboost {}".format(
                         record["index"],
                         _pair(original.get("applications_clocks")),
                         _pair(original.get("default_applications_clocks")),
                         _pair(original.get("max_clocks")),
                         original.get("autoboost")))
    return lines


def _telemetry_details(telemetry):
    lines = []
    for tele in telemetry.get("gpus", []):
        reasons = dict((k, v) for k, v in (tele.get("reasons") or {})
                       .items() if v)
        lines.append("   telemetry GPU {}: SM {} MHz, memory {} MHz, power"
                     " {} W, temp {} C, util {} %, energy {} J, reasons {}"
                     .format(tele["index"], _range(tele["sm_clock_mhz"]),
                             _range(tele["memory_clock_mhz"]),
                             _range(tele["power_w"]),
                             _range(tele["temperature_c"]),
                             _range(tele.get("utilization_pct")),
                             _fmt(tele["energy_j"], "{:.1f}"),
                             reasons or "none"))
    return lines


def _mfu_details(mfu):
    if not mfu:
        return []
    if mfu.get("value") is None:
        return ["   MFU: {}".format(mfu.get("note"))]
    return ["   MFU {:.2%} of {} peak {:.1f} TFLOP/s at {:.0f} MHz ({}); "
            "achieved {:.2f} TFLOP/s; vs datasheet peak {:.2%}".format(
                mfu["value"], mfu["precision"],
                mfu["peak_flops_per_s"] / 1e12, mfu["clock_mhz"],
                mfu["clock_source"], mfu["achieved_flops_per_s"] / 1e12,
                mfu["value_at_datasheet_clock"])]


def _pair(clocks):
    if not clocks or "error" in clocks:
        return (clocks or {}).get("error", "-")
    return "{}/{} MHz (SM/memory)".format(clocks["graphics_mhz"],
                                          clocks["memory_mhz"])


def _range(stats):
    if not stats:
        return "-"
    return "{:.0f}/{:.0f}/{:.0f}".format(stats["min"], stats["mean"],
                                         stats["max"])


def _before_first_iteration(result):
    """Seconds from the process's start (a fork child's: its fork) to its
    model built, the moment its first warm-up iteration begins."""
    phases = (result or {}).get("phases") or {}
    if phases.get("process_start") is None or \
            phases.get("model_built") is None:
        return None
    return phases["model_built"] - phases["process_start"]


def format_forked(cells, forked):
    """PyTorch's cells one process each against the same cells forked by
    one server: mean iteration, its ratio, and the time before the first
    iteration (a fork child pays its model build and its CUDA context)."""
    if not forked:
        return []
    alone = {c["id"]: c["result"] for c in cells}
    lines = ["== the same PyTorch cells forked by one server "
             "(--isolation fork)",
             "{:<26} {:<10} {:>13} {:>13} {:>7} {:>17} {:>17}".format(
                 "cell", "status", "process ms", "fork ms", "ratio",
                 "process to 1st s", "fork to 1st s")]
    for cell in forked:
        result = cell["result"] or {}
        mine = ((result.get("timing") or {}).get("mean_s"))
        theirs = ((alone.get(cell["id"]) or {}).get("timing") or {}).get(
            "mean_s")
        lines.append("{:<26} {:<10} {:>13} {:>13} {:>7} {:>17} {:>17}".format(
            cell["id"], result.get("status") or "no result",
            _fmt(theirs and theirs * 1e3, "{:.2f}"),
            _fmt(mine and mine * 1e3, "{:.2f}"),
            _fmt(mine and theirs and mine / theirs, "{:.3f}"),
            _fmt(_before_first_iteration(alone.get(cell["id"])), "{:.2f}"),
            _fmt(_before_first_iteration(result), "{:.2f}")))
        if not cell["result"] or result.get("status") != "ok":
            lines.extend("    " + line for line in cell["log_tail"])
    return lines
