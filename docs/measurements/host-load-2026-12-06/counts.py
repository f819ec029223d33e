"""What the processes of an isolation benchmark met while timed
(timing.host_cpu and timing.process_counts, harness/hostcpu.py), per
network and mode, and how much of the modes' difference their page faults
account for.

Reads the output folder of benchmarks/isolation.py (--out DIR). First
measures what a minor page fault costs on this machine (fresh anonymous
pages, one byte written in each), then prints per network: each mode's
processes, the mean of their timed windows (the sum of their timed
iterations), their minor faults in the window (mean, min-max), the CPUs
other processes used meanwhile; the observed ratio of mean windows
against `cell` and the ratio the faults alone predict (the window less
the cell's faults, plus the mode's, at the measured cost). Last, the
slope of window time on faults within each network and mode, pooled, and
where the results have it, how much the harness grew each cell's heap
between its warm-up and its timed iterations (environment.allocator's
room_bytes and room_s).

    python3 counts.py DIR [--framework pytorch]
"""
import argparse
import json
import mmap
import os
import resource
import statistics
import time
from pathlib import Path


def fault_cost_s(pages=25600, rounds=3):
    """Median seconds a minor fault costs here: pages mapped fresh and
    written once, less the same writes again (no fault)."""
    size = os.sysconf("SC_PAGE_SIZE")
    costs = []
    for _ in range(rounds):
        fresh = mmap.mmap(-1, pages * size)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        for offset in range(0, pages * size, size):
            fresh[offset] = 1
        faulting = time.perf_counter() - started
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        started = time.perf_counter()
        for offset in range(0, pages * size, size):
            fresh[offset] = 2
        costs.append((faulting - (time.perf_counter() - started)) / faults)
        fresh.close()
    return statistics.median(costs)


def processes(folder, framework, rooms=None):
    """{network: {mode: [(window s, minor faults, others' CPUs)]}}; each
    result's environment.allocator (room_bytes, room_s) appended to
    `rooms[mode]` where it has them."""
    found = {}
    for path in Path(folder, framework).glob("*/round*/*/*.json"):
        if path.name.endswith((".spec.json", ".invalid.json")) or \
                path.name == "run.json" or path.parent.name == "latest":
            continue
        result = json.loads(path.read_text())
        timing = result.get("timing") or {}
        if result.get("status") != "ok" or not timing.get("process_counts"):
            continue
        host = timing["host_cpu"]
        allocator = result["environment"].get("allocator") or {}
        if rooms is not None and "room_bytes" in allocator:
            rooms.setdefault(path.parts[-4], []).append(
                (allocator["room_bytes"], allocator["room_s"]))
        found.setdefault(result["cell"]["network"], {}).setdefault(
            path.parts[-4], []).append((
                sum(timing["per_iteration_s"]),
                timing["process_counts"]["minor_faults"],
                host["others_cpu_s"] / host["window_s"]))
    return found


def pooled_slope(found):
    """Seconds of timed window per fault, from the deviations within each
    network and mode (so that neither the network nor the mode counts)."""
    covariance = variance = 0.0
    for modes in found.values():
        for rows in modes.values():
            mean_s = statistics.mean(r[0] for r in rows)
            mean_f = statistics.mean(r[1] for r in rows)
            covariance += sum((s - mean_s) * (f - mean_f)
                              for s, f, _o in rows)
            variance += sum((f - mean_f) ** 2 for _s, f, _o in rows)
    return covariance / variance if variance else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--framework", default="pytorch")
    args = parser.parse_args()
    cost = fault_cost_s()
    print(f"a minor fault here: {cost * 1e6:.2f} us (median of 3 x 25600 "
          f"fresh pages)")
    rooms = {}
    found = processes(args.folder, args.framework, rooms)
    print(f"{'network':<10} {'mode':<5} {'n':>2} {'window ms':>9} "
          f"{'faults mean':>11} {'min-max':>13} {'others':>6} "
          f"{'/cell':>6} {'faults say':>10}")
    for network, modes in sorted(found.items()):
        base = modes.get("cell")
        for mode, rows in sorted(modes.items()):
            window = statistics.mean(r[0] for r in rows)
            faults = statistics.mean(r[1] for r in rows)
            line = (f"{network:<10} {mode:<5} {len(rows):>2} "
                    f"{window * 1e3:>9.1f} {faults:>11.0f} "
                    f"{min(r[1] for r in rows):>6}-"
                    f"{max(r[1] for r in rows):<6} "
                    f"{statistics.mean(r[2] for r in rows):>6.3f}")
            if base and mode != "cell":
                cell_window = statistics.mean(r[0] for r in base)
                cell_faults = statistics.mean(r[1] for r in base)
                line += (f" {window / cell_window:>6.3f} "
                         f"{(cell_window + (faults - cell_faults) * cost) / cell_window:>10.3f}")
            print(line)
    print(f"window time per fault within each network and mode, pooled: "
          f"{pooled_slope(found) * 1e6:.2f} us")
    for mode, grown in sorted(rooms.items()):
        sizes = sorted(b for b, _s in grown)
        print(f"{mode}: heap grown between warm-up and timing in "
              f"{len(grown)} cells, median {statistics.median(sizes) / 2**20:.1f}"
              f" MiB (max {sizes[-1] / 2**20:.1f}), "
              f"{statistics.median(s for _b, s in grown) * 1e3:.1f} ms median "
              f"(max {max(s for _b, s in grown) * 1e3:.1f})")


if __name__ == "__main__":
    main()
