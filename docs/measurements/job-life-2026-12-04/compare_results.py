"""python3 compare_results.py RUN_A RUN_B: results of the same cells from two runs compared block by block: every
block byte-identical except the ones that measure time (timing, phases,
started_at, finished_at, the compilation block's seconds, achieved FLOP/s,
the warnings about variation), and within `environment` and `isolation`
the fields that name a process or a path of the checkout."""
import json
import sys
from pathlib import Path

TIMED = {"timing", "phases", "started_at", "finished_at", "warnings"}
PER_PROCESS = {"environment": {"harness_path", "python_executable",
                               "memory"},
               "isolation": {"worker_pid", "rss_bytes", "memory",
                             "cells_before", "heap_trimmed"},
               "compilation": {"first_iteration_excess_s",
                               "first_iteration_s", "warmup_s"},
               "model": {"achieved_flops_per_s"}}


def results(run):
    return {p.name: json.loads(p.read_text()) for p in Path(run).glob("*.json")
            if p.name.count(".") == 1 and p.name != "run.json"}


# Seconds or bytes a process measured of itself, wherever they sit.
VOLATILE_ANYWHERE = {"settle_s", "rss_bytes"}


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items()
                if k not in VOLATILE_ANYWHERE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def comparable(result):
    result = _strip(result)
    kept = {}
    for key, value in result.items():
        if key in TIMED:
            continue
        if isinstance(value, dict) and key in PER_PROCESS:
            value = {k: v for k, v in value.items()
                     if k not in PER_PROCESS[key]}
        kept[key] = value
    return kept


a, b = results(sys.argv[1]), results(sys.argv[2])
assert set(a) == set(b), (set(a) ^ set(b))
same = differ = 0
for name in sorted(a):
    x, y = comparable(a[name]), comparable(b[name])
    if json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True):
        same += 1
        continue
    differ += 1
    for key in sorted(set(x) | set(y)):
        if json.dumps(x.get(key), sort_keys=True) != json.dumps(y.get(key), sort_keys=True):
            print(f"{name}: block {key} differs:\n  {x.get(key)}\n  {y.get(key)}")
print(f"{same} results identical outside their timings, {differ} differ "
      f"(of {len(a)})")
