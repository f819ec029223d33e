"""The smoke suite under --isolation fork, natively, from two checkouts in
alternating rounds (A B, then B A, ...): per framework, the sweep's
measured fraction, each cell's model build (framework_imported to
model_built, the collector's settle included) and the ratio B/A of each
network's mean iteration time.

    python3 ab.py --a /path/to/before --b /path/to/after --rounds 3 \
        --framework pytorch --framework jax --framework mxnet
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time


def sweep(checkout, frameworks, out):
    argv = [str(checkout / ".venv/bin/invoke"), "bench", "--suite", "smoke",
            "--runtime", "native", "--isolation", "fork", "--out", str(out)]
    for name in frameworks:
        argv += ["--framework", name]
    started = time.time()
    subprocess.run(argv, cwd=str(checkout), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.time() - started


def cells(run):
    """{framework: [result, ...]} of a run folder's ok cells."""
    found = {}
    for path in sorted(run.glob("*.json")):
        if path.name == "run.json" or path.name.endswith(".spec.json"):
            continue
        result = json.loads(path.read_text())
        if result.get("status") == "ok":
            found.setdefault(result["cell"]["framework"], []).append(result)
    return found


def fraction(results):
    """Warm-up and timed iterations over first child's start to last
    result written."""
    measured = sum(sum(r["timing"]["per_iteration_s"]) +
                   sum(r["timing"].get("warmup_s") or []) for r in results)
    start = min(r["isolation"]["parent"]["process_start"] for r in results)
    end = max(r["phases"]["result_written"] for r in results)
    return measured / (end - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, type=pathlib.Path)
    parser.add_argument("--b", required=True, type=pathlib.Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--framework", action="append", required=True)
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path("/tmp/fork-freeze-ab"))
    args = parser.parse_args()
    runs = {"A": [], "B": []}
    for rnd in range(args.rounds):
        order = ("A", "B") if rnd % 2 == 0 else ("B", "A")
        for side in order:
            out = args.out / "{}{}".format(side, rnd)
            wall = sweep(args.a if side == "A" else args.b, args.framework,
                         out)
            runs[side].append(cells((out / "latest").resolve()))
            print("round {} {}: {:.1f} s".format(rnd + 1, side, wall),
                  file=sys.stderr)
    for framework in args.framework:
        print("\n{}".format(framework))
        for side in "AB":
            fractions = [fraction(r[framework]) for r in runs[side]]
            builds = [r["phases"]["model_built"] -
                      r["phases"]["framework_imported"]
                      for run in runs[side] for r in run[framework]]
            settles = [r["environment"]["python_gc"]["settle_s"]
                       for run in runs[side] for r in run[framework]]
            print("  {}: measured fraction {}; model build per cell median "
                  "{:.3f} s, sum {:.2f} s a sweep; settle median {:.3f} s"
                  .format(side, ", ".join("%.2f" % f for f in fractions),
                          statistics.median(builds),
                          sum(builds) / len(runs[side]),
                          statistics.median(settles)))
        means = {}
        for side in "AB":
            for run in runs[side]:
                for r in run[framework]:
                    means.setdefault(r["cell"]["network"], {}).setdefault(
                        side, []).append(statistics.mean(
                            r["timing"]["per_iteration_s"]))
        ratios = {net: statistics.mean(m["B"]) / statistics.mean(m["A"])
                  for net, m in means.items() if "A" in m and "B" in m}
        print("  mean iteration B/A: " + ", ".join(
            "{} {:.3f}".format(n, v) for n, v in sorted(ratios.items())))
        print("  geometric mean B/A {:.3f}".format(
            statistics.geometric_mean(ratios.values())))


if __name__ == "__main__":
    main()
