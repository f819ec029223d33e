"""Per framework, from one or more run folders: the median gap between a
cell's result on disk (`phases.result_written`) and the next cell's start
(its fork, `phases.process_start`; in a group worker, `harness_ready`),
and the median model build (`framework_imported` -> `model_built`) of
fcn5, fcn8 and alexnet.
    python3 gaps.py RUN_FOLDER [RUN_FOLDER ...]"""
import json
import statistics
import sys

LARGE = ("fcn5", "fcn8", "alexnet")


def results(run):
    with open(run + "/run.json") as handle:
        jobs = json.load(handle)["jobs"]
    for entry in jobs:
        try:
            with open(run + "/" + entry["file"]) as handle:
                result = json.load(handle)
        except (OSError, ValueError):
            continue
        if result.get("status") == "ok":
            yield result


def main(runs):
    gaps, builds = {}, {}
    for run in runs:
        last = {}
        for result in results(run):
            framework = result["cell"]["framework"]
            phases = result["phases"]
            start = phases.get("process_start") or phases["harness_ready"]
            if framework in last:
                gaps.setdefault(framework, []).append(start - last[framework])
            last[framework] = phases["result_written"]
            if result["cell"]["network"] in LARGE:
                builds.setdefault(framework, []).append(
                    phases["model_built"] - phases["framework_imported"])
    for framework in sorted(gaps):
        print("{:<11} gap between cells: median {:.3f} s, sum {:.2f} s "
              "({} gaps); build of fcn5/fcn8/alexnet: median {:.3f} s, "
              "sum {:.2f} s".format(
                  framework, statistics.median(gaps[framework]),
                  sum(gaps[framework]), len(gaps[framework]),
                  statistics.median(builds[framework]),
                  sum(builds[framework])))


if __name__ == "__main__":
    main(sys.argv[1:])
