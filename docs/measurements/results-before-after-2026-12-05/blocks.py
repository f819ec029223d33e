"""python3 blocks.py RUN_A RUN_B: which fields of the cells both runs
measured differ between them, block by block, and in which frameworks.
A top-level key is one row; within a block that is a mapping in both
results, each field is one row ("model.achieved_flops_per_s"). Cells that
only one run has are named first."""
import json
import sys
from collections import defaultdict
from pathlib import Path


def results(run):
    return {p.name: json.loads(p.read_text())
            for p in Path(run).glob("*.json")
            if p.name.count(".") == 1 and p.name != "run.json"}


def differing(x, y, prefix=""):
    """The dotted names of the fields where x and y differ, one level into
    mappings that both sides have."""
    for key in sorted(set(x) | set(y)):
        a, b = x.get(key), y.get(key)
        if json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True):
            continue
        if not prefix and isinstance(a, dict) and isinstance(b, dict):
            yield from differing(a, b, key + ".")
        else:
            yield prefix + key


def main(run_a, run_b):
    a, b = results(run_a), results(run_b)
    print(f"only in {run_a}: {sorted(set(a) - set(b))}")
    print(f"only in {run_b}: {sorted(set(b) - set(a))}")
    common = sorted(set(a) & set(b))
    where = defaultdict(set)
    for name in common:
        for field in differing(a[name], b[name]):
            where[field].add(a[name]["cell"]["framework"])
    frameworks = sorted(set(a[n]["cell"]["framework"] for n in common))
    print(f"{len(common)} cells in both ({', '.join(frameworks)}); "
          "fields that differ, and where:")
    for field, seen in sorted(where.items()):
        print(f"  {field}: {', '.join(sorted(seen))}")
    moved = set().union(*[seen for field, seen in where.items()
                          if field.split(".")[0] == "loss"])
    same = [f for f in frameworks if f not in moved]
    print(f"every loss of every iteration identical: {', '.join(same)}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
