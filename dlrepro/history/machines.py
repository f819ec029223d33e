"""The same cells on different machines, side by side.

Only truly identical cells share a row: equal identity (every cell field,
dlrepro.history.db.cell_key). A cell seen in several runs of one machine
is shown by its latest run. What differs between the machines (CPU, GPU,
driver, framework and Python versions, images, harness) is listed beside
the table, since those are what a row's ratio is made of. The 2016
reference (benchmarks/reference/) is one more machine per GPU it used,
matched on framework lineage, network, batch and one GPU only, and
labelled so: its timings include each tool's data pipeline.
"""
import json

from dlrepro.bench import compare

FILTERS = ("suite", "framework", "network", "machine", "isolation")
# The facts of a machine (and of how its cells ran: one process each or
# a group's worker) that can make the same cell run differently.
FACTS = (("cpu", "run_cpu_model"), ("gpu", "run_gpu"),
         ("driver", "run_driver"), ("framework", "framework_version"),
         ("python", "python_version"), ("cuda", "cuda"), ("cudnn", "cudnn"),
         ("image", "image_digest"), ("harness", "harness_digest"),
         ("isolation", "isolation"))
REFERENCE_NOTE = ("2016: raw runs posted by the paper's authors, data "
                  "pipeline included; CNTK's LSTM counted tokens")


def select(rows, suite=(), framework=(), network=(), machine=(),
           isolation=()):
    """The rows that pass every filter given (each a list of accepted
    values; empty accepts all). A row exported before the isolation
    column (None) passes no isolation filter."""
    wanted = {"run_suite": suite, "framework": framework,
              "network": network, "machine": machine,
              "isolation": isolation}
    return [r for r in rows
            if all(not values or r.get(key) in values
                   for key, values in wanted.items())]


def latest_per_machine(rows):
    """{cell_key: {machine: row}}: each machine's latest ok row of a cell."""
    out = {}
    for row in rows:
        if row["status"] != "ok" or row["mean_s"] is None:
            continue
        mine = out.setdefault(row["cell_key"], {})
        held = mine.get(row["machine"])
        if held is None or (row["run_started_at"] or "") >= (
                held["run_started_at"] or ""):
            mine[row["machine"]] = row
    return out


def reference_machines(path=compare.REFERENCE):
    """{(framework, network, batch): {machine label: seconds}} of the 2016
    single-GPU reference, under our frameworks' names."""
    ours = {tool: fw for fw, tool in compare.LINEAGE.items()}
    out = {}
    for record in compare.load_reference(path):
        framework = ours.get(record["tool"])
        if framework is None or record.get("gpus", 1) != 1:
            continue
        key = (framework, record["network"], record["batch_size"])
        out.setdefault(key, {})[f"2016 {record['gpu']}"] = \
            record["seconds_per_minibatch"]
    return out


def describe(cell):
    setting = (f"{cell['gpus']} GPU" if cell["device"] == "gpu"
               else f"{cell['threads']} thr")
    return (f"{cell['framework']} {cell['network']} "
            f"b{cell['global_batch_size']} {cell['device']} {setting} "
            f"{cell['runtime']}")


def table(rows, reference=None):
    """(machines, [row]) of the cells measured on two or more machines
    (the reference counting as machines where a cell matches it). Each row:
    cell (dict), name, {machine: seconds}, {machine: (low, high)}."""
    found = []
    for key, by_machine in sorted(latest_per_machine(rows).items()):
        cell = json.loads(key)
        times = {m: r["mean_s"] for m, r in by_machine.items()}
        cis = {m: (r["ci95_low_s"], r["ci95_high_s"])
               for m, r in by_machine.items()}
        if reference and cell["device"] == "gpu" and cell["gpus"] == 1:
            times.update(reference.get((cell["framework"], cell["network"],
                                        cell["global_batch_size"]), {}))
        if len(times) >= 2:
            found.append({"cell": cell, "name": describe(cell),
                          "times": times, "cis": cis})
    machines = sorted({m for r in found for m in r["times"]},
                      key=lambda m: (m.startswith("2016 "), m))
    return machines, found


def differences(rows, machines):
    """[(fact, {machine: values})] for the facts that differ between the
    machines; the rest are the same everywhere and not listed."""
    out = []
    for fact, key in FACTS:
        seen = {m: sorted({str(r.get(key)) for r in rows
                           if r["machine"] == m and r.get(key) is not None})
                for m in machines if not m.startswith("2016 ")}
        if len({tuple(v) for v in seen.values()}) > 1:
            out.append((fact, {m: ", ".join(v) or "-"
                               for m, v in seen.items()}))
    return out


def format_table(machines, found, diffs):
    if not found:
        return ["no cell was measured on two or more machines (the same "
                "cell: every identity field equal)"]
    width = max(len(r["name"]) for r in found)
    columns = [max(len(m), 10) for m in machines]
    lines = ["ms per mini-batch, the latest run of each machine; the same "
             "cell only (every identity field equal)",
             f"{'cell':<{width}}  " + "  ".join(
                 f"{m:>{w}}" for m, w in zip(machines, columns))]
    for row in found:
        values = [f"{row['times'][m] * 1e3:>{w}.3f}" if m in row["times"]
                  else f"{'-':>{w}}" for m, w in zip(machines, columns)]
        lines.append(f"{row['name']:<{width}}  " + "  ".join(values))
    if any(m.startswith("2016 ") for m in machines):
        lines.append(REFERENCE_NOTE)
    measured = [m for m in machines if not m.startswith("2016 ")]
    if len(measured) < 2:
        lines.append(f"one measured machine ({', '.join(measured)}) beside "
                     "the 2016 reference")
        return lines
    lines.append("what differs between the machines:" if diffs else
                 "the machines differ in no recorded fact (CPU, GPU, driver, "
                 "versions, image, harness)")
    for fact, values in diffs:
        lines.append(f"  {fact}: " + "; ".join(f"{m}: {v}"
                                               for m, v in values.items()))
    return lines
