#!/usr/bin/env python3
"""What does GPU telemetry cost a timed iteration?

The harness samples NVML from a background thread while a GPU cell's timed
iterations run. This times the same PyTorch session with the sampler off
and on, in one process, alternating blocks of iterations (ABBA), at the
harness's interval and at a five times shorter one, and prints the ratio of
mean iteration times (on / off). Observe-only: it reads NVML, changes
nothing.

    python3 benchmarks/telemetry_overhead.py     # ~1-2 minutes on one GPU
    python3 benchmarks/telemetry_overhead.py --json

It needs a GPU, PyTorch with CUDA and nvidia-ml-py; without them it says
which is missing and exits 2.
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import networks as nets, timing  # noqa: E402
from harness.gpu import telemetry  # noqa: E402
from harness.gpu.nvml import Nvml  # noqa: E402

CASES = (("fcn5", 512), ("alexnet", 128), ("resnet50", 32))


def measure(step, reader, interval_s, rounds, block):
    """Alternating blocks with the sampler off and on (ABBA); raw seconds
    per iteration of each side, per-round ratios of means, and what the
    sampler read."""
    sides = {"off": [], "on": []}
    ratios, samples, missed = [], 0, 0
    for index in range(rounds):
        order = ("off", "on") if index % 2 == 0 else ("on", "off")
        means = {}
        for side in order:
            sampler = None
            if side == "on":
                sampler = telemetry.Sampler(reader, interval_s)
                sampler.start()
            # One untimed iteration: each block starts from an idle device.
            series = timing.run_loop(step, block, 1)
            if sampler is not None:
                sampler.stop()
                if sampler.error:
                    raise RuntimeError("sampler: " + sampler.error)
                samples += len(sampler.samples)
                missed += sampler.missed
            sides[side].extend(series.times)
            means[side] = statistics.mean(series.times)
        ratios.append(means["on"] / means["off"])
    off, on = statistics.mean(sides["off"]), statistics.mean(sides["on"])
    return {"interval_s": interval_s, "off_mean_s": off, "on_mean_s": on,
            "ratio": on / off, "median_round_ratio": statistics.median(ratios),
            "round_ratios": ratios, "samples": samples, "missed": missed,
            "off_s": sides["off"], "on_s": sides["on"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--block", type=int, default=30,
                        help="timed iterations per block (default 30)")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    nvml, reason = Nvml.open()
    if nvml is None:
        sys.stderr.write("telemetry_overhead: no NVML ({})\n".format(reason))
        return 2
    try:
        import torch
    except ImportError:
        sys.stderr.write("telemetry_overhead: PyTorch is not installed\n")
        return 2
    if not torch.cuda.is_available():
        sys.stderr.write("telemetry_overhead: PyTorch sees no CUDA device\n")
        return 2
    from harness.frameworks.pytorch import backend
    backend.configure(None, "gpu", 0)
    handle = nvml.call("nvmlDeviceGetHandleByIndex", 0)
    reader = telemetry.NvmlReader(nvml, [handle])
    intervals = (telemetry.DEFAULT_INTERVAL_S,
                 telemetry.DEFAULT_INTERVAL_S / 5)
    report = {"gpu": torch.cuda.get_device_name(0),
              "torch": torch.__version__, "rounds": args.rounds,
              "block": args.block, "cases": []}
    for name, batch in CASES:
        session = backend.prepare(nets.get(name), batch, "gpu", 0)
        timing.run_loop(session.step, 0, args.warmup)
        for interval in intervals:
            case = measure(session.step, reader, interval, args.rounds,
                           args.block)
            case.update(network=name, batch_size=batch)
            report["cases"].append(case)
            if not args.json:
                print("{:<9} b{:<5} interval {:>3.0f} ms: off {:8.3f} ms, on "
                      "{:8.3f} ms, ratio on/off {:.4f} (median of rounds "
                      "{:.4f}, rounds {:.3f}..{:.3f}), {} samples, {} missed"
                      .format(name, batch, interval * 1e3,
                              case["off_mean_s"] * 1e3,
                              case["on_mean_s"] * 1e3, case["ratio"],
                              case["median_round_ratio"],
                              min(case["round_ratios"]),
                              max(case["round_ratios"]),
                              case["samples"], case["missed"]))
                sys.stdout.flush()
        del session
        torch.cuda.empty_cache()
    nvml.close()
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
