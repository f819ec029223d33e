"""Convergence runs on the host: plan one run per (framework, network,
worker count), check the data before anything starts, run each in its
framework's native environment (one harness process each, with a
timeout), and compare the worker counts.

Run folder: <out>/<stamp>-converge-<hex>/ with one result file per run
(<framework>-<network>-w<workers>.json, harness/result.schema.json with its
`convergence` block), its spec and log, run.json (kind "convergence": the
command, start/end, every run with its status and file) and
convergence.json (the figures across worker counts,
harness.figures.compare). <out>/latest-converge links the newest one
(<out>/latest stays `invoke bench`'s).
"""
import json
import os
import sys
import time
from pathlib import Path

from harness import converge as hconverge
from harness import datasets as hd
from harness import figures, resultfile
from harness.errors import HarnessError

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.run import runfolder as results_mod
from dlrepro.run import sweep
from dlrepro.converge.datasets import DEFAULT_DATA_DIR
from dlrepro.errors import UserError
from dlrepro.run.runtimes import Launch

DEFAULT_OUT = ROOT / "results"
LATEST = "latest-converge"
NETWORKS = tuple(sorted(hd.NETWORK_DATASETS))
# PAPER.md: epochs of the real-data runs, and the global batch (total over
# workers) of its multi-GPU runs and its CPU runs. The paper lists no
# multi-GPU batch for the LSTM; its single-GPU 128 stands in.
PAPER_EPOCHS = {"fcn-r": 40, "alexnet-r": 40, "resnet-56": 40, "lstm": 20}
PAPER_GLOBAL_BATCH = {
    "gpu": {"fcn-r": 4096, "alexnet-r": 1024, "resnet-56": 128, "lstm": 128},
    "cpu": {"fcn-r": 1024, "alexnet-r": 1024, "resnet-56": 128, "lstm": 128},
}
DEFAULT_TIMEOUT_S = 6 * 3600


def parse_counts(text, what):
    """"1,2,4" -> [1, 2, 4] (sorted, unique); errors name the flag."""
    values = []
    for part in str(text).split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise UserError(f"{what} must be positive integers separated by "
                            f"commas, got {text!r}")
        values.append(int(part))
    return sorted(set(values))


def _positive(value, what, optional=True):
    if value is None and optional:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a positive integer, got {value!r}")
    if number < 1 or str(number) != str(value).strip():
        raise UserError(f"{what} must be a positive integer, got {value!r}")
    return number


def plan(frameworks, networks, workers, *, device="cpu", global_batch=None,
         epochs=None, seed=0, threads=None, data_dir=None, synthetic=False,
         train_samples=None, test_samples=None, target_loss=None,
         checksums=None, profile=None, matrix=None, runtime="native",
         clock_policy="observe"):
    """The convergence specs (harness.converge's fields) of a run, in
    order; raises UserError for anything the harness would reject."""
    matrix = matrix if matrix is not None else matrix_mod.load()
    if not frameworks:
        raise UserError("name at least one --framework")
    for framework in frameworks:
        matrix_mod.profiles(matrix, framework)
    for network in networks:
        if network not in NETWORKS:
            raise UserError(f"unknown convergence network {network!r}; valid "
                            f"networks: {', '.join(NETWORKS)}")
    if device not in ("cpu", "gpu"):
        raise UserError(f"device must be cpu or gpu, got {device!r}")
    if runtime not in ("native", "docker"):
        raise UserError(f"unknown runtime {runtime!r}; valid runtimes: "
                        f"docker, native")
    seed = 0 if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"seed must be an integer >= 0, got {seed!r}")
    threads = _positive(threads, "threads")
    train_samples = _positive(train_samples, "train-samples")
    test_samples = _positive(test_samples, "test-samples")
    if target_loss is not None:
        try:
            target_loss = float(target_loss)
        except ValueError:
            raise UserError(f"target-loss must be a number, got {target_loss!r}")
        if not target_loss > 0:
            raise UserError(f"target-loss must be positive, got {target_loss}")
    if synthetic and (data_dir is not None or checksums is not None):
        raise UserError("--synthetic and --data-dir exclude each other")
    specs = []
    for network in networks:
        batch = _positive(global_batch, "global-batch-size") or \
            PAPER_GLOBAL_BATCH[device][network]
        run_epochs = _positive(epochs, "epochs") or PAPER_EPOCHS[network]
        data = _data_spec(network, data_dir, synthetic, checksums,
                          train_samples, test_samples)
        for count in workers:
            try:
                hconverge.check_split(batch, count)
            except HarnessError as exc:
                raise UserError(str(exc))
        for framework in frameworks:
            profile_name = profile or matrix_mod.default_profile(
                matrix, framework, device)
            matrix_mod.entry(matrix, framework, profile_name)
            for count in workers:
                specs.append({
                    "framework": framework, "profile": profile_name,
                    "network": network, "device": device, "workers": count,
                    "global_batch_size": batch, "epochs": run_epochs,
                    "seed": seed, "threads": threads, "runtime": runtime,
                    "clock_policy": clock_policy, "data": data,
                    "target_loss": target_loss,
                })
    return specs


def _data_spec(network, data_dir, synthetic, checksums, train_samples,
               test_samples):
    name = hd.for_network(network)
    limits = {"train_samples": train_samples, "test_samples": test_samples}
    if synthetic:
        return dict(source="synthetic", name=name, **limits)
    folder = Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR
    return dict(source="files", name=name, dir=str(folder.resolve()),
                checksums=checksums, **limits)


def check_data(specs, log=print):
    """Verify every dataset the specs read, once each, before any run starts
    (a missing folder or a corrupt file is a UserError naming it)."""
    seen = set()
    for spec in specs:
        data = spec["data"]
        if data["source"] != "files":
            continue
        key = (data["name"], data["dir"])
        if key in seen:
            continue
        seen.add(key)
        try:
            _layout, _contents, records = hd.read_verified(
                data["name"], data["dir"], data.get("checksums"))
        except HarnessError as exc:
            raise UserError(str(exc))
        log(f"{hd.label(data['name'], records, data.get('checksums') is not None)}"
            f" verified in {data['dir']}")


def run_name(spec):
    return f"{spec['framework']}-{spec['network']}-w{spec['workers']}"


def _native_launch(python, spec_path, out_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return Launch(argv=[str(python), "-s", "-m", "harness", "converge",
                        "--spec", str(spec_path), "--out", str(out_path)],
                  env=env, cwd=str(ROOT))


def _container_launch(runtime, spec, run_dir, name):
    """The run in its framework's image: the docker runtime's cell launch
    with the harness's `converge` command and the data mounted read-only."""
    cell = {"framework": spec["framework"], "profile": spec["profile"],
            "device": spec["device"], "threads": spec["threads"],
            "gpus": spec["workers"] if spec["device"] == "gpu" else 0,
            "clock_policy": spec["clock_policy"]}
    data_dir = spec["data"].get("dir")
    return runtime.launch(cell, run_dir, name, subcommand="converge",
                          read_only=[data_dir] if data_dir else [])


def _launch(launch, log_path, timeout):
    """Run one harness process under the sweep's timeout policy (SIGTERM,
    a grace period, then SIGKILL of its process group); returns (exit
    status, timed out, seconds)."""
    log_path.write_text(" ".join(launch.argv) + "\n")
    start = time.monotonic()
    try:
        status, timed_out = sweep._run_process(launch, log_path, timeout)
    finally:
        if launch.cleanup:
            launch.cleanup()
    return status, timed_out, time.monotonic() - start


def _last_line(path):
    try:
        lines = [l.strip() for l in Path(path).read_text().splitlines()
                 if l.strip()]
    except OSError:
        return None
    for line in reversed(lines):
        if line.startswith("harness: error:"):
            return line[len("harness: error:"):].strip()
    return lines[-1] if lines else None


def environments(specs, log=print, runtime=None):
    """{(framework, profile): where it runs, or why it cannot run here (a
    str)}: a python (a Path) natively, the docker runtime with its image
    ready otherwise. Makes the environments or images the specs need."""
    from dlrepro.run import runtimes
    runtime = runtime or runtimes.get(specs[0]["runtime"] if specs
                                      else "native")
    runtime.check()
    targets = sorted({(s["framework"], s["profile"]) for s in specs})
    reasons = runtime.prepare(targets, log=log)
    if runtime.name == "native":
        return dict((t, reasons[t] or runtime.pythons[t]) for t in targets)
    return dict((t, reasons[t] or runtime) for t in targets)


def run(specs, out=DEFAULT_OUT, *, pythons, timeout=DEFAULT_TIMEOUT_S,
        command=None, log=print, resume=False):
    """Run every spec; returns (run folder, {name: result or None}).
    `pythons`: environments()'s answer. `resume` continues the latest
    convergence run under `out`: a run whose result is final (ok,
    unsupported, diverged, ...) with the same spec is kept, not rerun."""
    out = Path(out)
    if resume:
        run_dir, record = run_to_resume(out)
        record.setdefault("resumed_at", []).append(results_mod.utc_now())
    else:
        run_dir = results_mod.create_run(out, "converge")
        record = {"kind": "convergence", "run_id": run_dir.name,
                  "command": command or sys.argv,
                  "started_at": results_mod.utc_now(), "finished_at": None,
                  "host": results_mod.host_info(), "runs": []}
    before = dict((entry["name"], entry) for entry in record["runs"])
    record["runs"], record["finished_at"] = [], None
    # On disk and `latest` from the start, so that a killed run resumes.
    resultfile.write_atomic(run_dir / "run.json", record)
    results_mod.point_latest(out, run_dir, LATEST)
    results = {}
    for index, spec in enumerate(specs, 1):
        name = run_name(spec)
        spec_path = run_dir / f"{name}.spec.json"
        out_path = run_dir / f"{name}.json"
        log_path = run_dir / f"{name}.log"
        done = _finished(spec, spec_path, out_path) if resume else None
        if done is not None:
            entry = before.get(name) or {
                "name": name, "file": out_path.name, "spec": spec,
                "seconds": 0.0, "exit_status": None,
                "status": done["status"],
                "error": (done.get("error") or {}).get("message")}
            results[name] = done
            record["runs"].append(entry)
            resultfile.write_atomic(run_dir / "run.json", record)
            log(f"[{index}/{len(specs)}] {name}: {done['status']} in the "
                f"resumed run, kept")
            continue
        where = pythons.get((spec["framework"], spec["profile"]))
        container = (where.describe(spec["framework"], spec["profile"])
                     if hasattr(where, "describe") else None)
        resultfile.write_atomic(spec_path, {"convergence": spec,
                                            "container": container,
                                            "stack": _stack(spec)})
        log(f"[{index}/{len(specs)}] {name}")
        entry = {"name": name, "file": out_path.name, "spec": spec,
                 "seconds": 0.0, "exit_status": None}
        if where is None or isinstance(where, str):
            # No environment or image here (e.g. CNTK natively): the reason.
            entry.update(status="unsupported", error=where or "no python")
            results[name] = None
            record["runs"].append(entry)
            resultfile.write_atomic(run_dir / "run.json", record)
            log(f"    unsupported: {entry['error']}")
            continue
        launch = (_native_launch(where, spec_path, out_path)
                  if isinstance(where, Path)
                  else _container_launch(where, spec, run_dir, name))
        status, timed_out, seconds = _launch(launch, log_path, timeout)
        entry.update(seconds=seconds, exit_status=status)
        result = _read_result(out_path)
        if timed_out:
            entry["status"] = "timeout"
            entry["error"] = f"stopped at its {timeout} s timeout"
            if result is not None:
                result["status"] = "timeout"
                result["error"] = {"type": "Timeout",
                                   "message": entry["error"]}
                resultfile.write_atomic(out_path, result)
        elif result is None:
            entry["status"] = "error"
            entry["error"] = _last_line(log_path) or \
                f"the harness exited with status {status} and no result"
        else:
            entry["status"] = result["status"]
            entry["error"] = (result.get("error") or {}).get("message")
        results[name] = result
        record["runs"].append(entry)
        log(f"    {entry['status']}" + (f": {entry['error']}"
                                        if entry.get("error") else ""))
        resultfile.write_atomic(run_dir / "run.json", record)
    record["finished_at"] = results_mod.utc_now()
    resultfile.write_atomic(run_dir / "run.json", record)
    summary = summarise([r for r in results.values() if r is not None])
    resultfile.write_atomic(run_dir / "convergence.json", summary)
    results_mod.point_latest(out, run_dir, LATEST)
    return run_dir, results


def run_to_resume(out):
    """(folder, run.json) of the latest convergence run under `out`, or a
    UserError when there is none."""
    out = Path(out)
    if not (out / LATEST / "run.json").exists():
        raise UserError(f"no convergence run under {out} to resume; run "
                        f"without --resume")
    run_dir = latest_run(out)
    record, _ = load_run(run_dir)
    return run_dir, record


def _finished(spec, spec_path, out_path):
    """The result of an earlier attempt at `spec`, when it is final and was
    asked with the same spec; else None (it runs again)."""
    result = _read_result(out_path)
    if result is None or result["status"] not in results_mod.DONE_STATUSES:
        return None
    try:
        asked = json.loads(spec_path.read_text())["convergence"]
    except (OSError, ValueError, KeyError):
        return None
    same = json.dumps(asked, sort_keys=True) == json.dumps(
        json.loads(json.dumps(spec)), sort_keys=True)
    return result if same else None


def _stack(spec):
    """The matrix's facts about the framework's stack, for the harness's GPU
    compatibility gate (as the sweep gives them); None when unknown."""
    try:
        entry = matrix_mod.entry(matrix_mod.load(), spec["framework"],
                                 spec["profile"])
        return {key: entry[key] for key in
                ("framework_version", "python", "cuda", "cudnn", "nccl",
                 "sass", "ptx", "min_driver")}
    except (UserError, KeyError):
        return None


def _read_result(path):
    """The harness's result, schema-checked; an invalid one is kept aside
    and counts as none."""
    if not path.exists():
        return None
    try:
        result = resultfile.load(str(path))
    except (OSError, ValueError):
        return None
    if results_mod.validation_errors(result):
        os.replace(path, path.with_suffix(".invalid.json"))
        return None
    return result


def _group_key(result):
    cell = result["cell"]
    return (cell["framework"], cell["network"], cell["device"],
            cell["global_batch_size"], result["convergence"]["epochs"],
            cell["seed"], cell["dataset"])


def summarise(results):
    """{"comparisons": [...]}: harness.figures.compare over the worker
    counts of each (framework, network, device, global batch, epochs,
    seed, dataset); runs that produced no curves appear with their status
    only."""
    groups = {}
    for result in results:
        if result.get("convergence") is None:
            continue
        groups.setdefault(_group_key(result), []).append(result)
    comparisons = []
    for key in sorted(groups, key=lambda k: tuple(str(v) for v in k)):
        members = sorted(groups[key],
                         key=lambda r: r["convergence"]["workers"])
        trained = [r for r in members if r["convergence"]["per_epoch"]]
        targets = {r["convergence"]["target_loss"] for r in trained}
        target = targets.pop() if len(targets) == 1 else None
        compared = figures.compare([
            {"workers": r["convergence"]["workers"],
             "per_epoch": r["convergence"]["per_epoch"],
             "processing_time_s": r["convergence"]["processing_time_s"]}
            for r in trained], target) if trained else \
            {"target_loss": None, "target_source": None, "rows": []}
        status = dict((r["convergence"]["workers"], r) for r in members)
        for row in compared["rows"]:
            row["status"] = status[row["workers"]]["status"]
        for r in members:
            if not r["convergence"]["per_epoch"]:
                compared["rows"].append({
                    "workers": r["convergence"]["workers"],
                    "status": r["status"],
                    "reason": (r.get("error") or {}).get("message")})
        compared["rows"].sort(key=lambda row: row["workers"])
        framework, network, device, batch, epochs, seed, dataset = key
        compared.update({
            "framework": framework, "network": network, "device": device,
            "global_batch_size": batch, "epochs": epochs, "seed": seed,
            "dataset": dataset,
            "mechanism": members[0]["convergence"]["mechanism"],
            "note": next((r["convergence"]["parallel_note"] for r in members
                          if r["convergence"]["parallel_note"]), None),
        })
        comparisons.append(compared)
    return {"kind": "convergence-summary", "comparisons": comparisons}


def _fmt(value, spec):
    if value is None:
        return "-"
    return format(value, spec)


def table_lines(summary):
    """The convergence figures as text lines (one block per comparison)."""
    lines = []
    header = (f"{'workers':>7} {'status':<11} {'ep->tgt':>7} {'s->tgt':>8} "
              f"{'ep ratio':>8} {'s ratio':>7} {'s/iter':>8} {'speedup':>7} "
              f"{'effic.':>6} {'final loss':>10} {'test acc':>8}")
    for comp in summary["comparisons"]:
        dataset = comp["dataset"]
        if " sha256:" in dataset:
            name, digest = dataset.split(" sha256:", 1)
            dataset = f"{name} sha256:{digest[:12]}..."
        lines.append(f"{comp['framework']} {comp['network']} on "
                     f"{comp['device']}, global batch "
                     f"{comp['global_batch_size']}, {comp['epochs']} epochs, "
                     f"seed {comp['seed']}, data {dataset}")
        lines.append(f"  target loss {_fmt(comp['target_loss'], '.4f')} "
                     f"({comp['target_source'] or 'no curves'}); "
                     f"{comp['mechanism']}")
        lines.append("  " + header)
        for row in comp["rows"]:
            if "reason" in row:
                lines.append(f"  {row['workers']:>7} {row['status']:<11} "
                             f"{row['reason'] or ''}")
                continue
            lines.append(
                f"  {row['workers']:>7} {row['status']:<11} "
                f"{_fmt(row['epochs_to_target'], 'd'):>7} "
                f"{_fmt(row['seconds_to_target'], '.1f'):>8} "
                f"{_fmt(row['epochs_ratio'], '.2f'):>8} "
                f"{_fmt(row['seconds_ratio'], '.2f'):>7} "
                f"{_fmt(row['processing_time_s'], '.4f'):>8} "
                f"{_fmt(row['speedup'], '.2f'):>7} "
                f"{_fmt(row['scaling_efficiency'], '.2f'):>6} "
                f"{_fmt(row['final_train_loss'], '.4f'):>10} "
                f"{_fmt(row['final_test_accuracy'], '.3f'):>8}")
        if comp["note"]:
            lines.append(f"  note: {comp['note']}")
    return lines


def latest_run(out=DEFAULT_OUT):
    path = Path(out) / LATEST
    if not (path / "run.json").exists():
        raise UserError(f"no convergence run under {out} yet; run `invoke "
                        f"converge` first")
    return path.resolve()


def load_run(run_dir):
    """(run.json, [results]) of a convergence run folder."""
    run_dir = Path(run_dir)
    try:
        record = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{run_dir} is not a convergence run folder: {exc}")
    if record.get("kind") != "convergence":
        raise UserError(f"{run_dir} is not a convergence run folder (run.json "
                        f"kind {record.get('kind')!r})")
    results = []
    for entry in record["runs"]:
        path = run_dir / entry["file"]
        if path.exists():
            results.append(results_mod.load_result(path))
    return record, results
