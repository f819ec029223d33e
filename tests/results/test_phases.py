"""Where a sweep's time went (dlrepro.bench.phases), from results built on
the real schema, and the harness's own clock reading (harness.phases)."""
import datetime
import re

import pytest

from dlrepro.bench import phases
from dlrepro.run import store
from harness import blocks, networks, phases as harness_phases, provenance
from harness.timing import Series

from cli import invoke
from paths import ROOT, SCRIPTED

T0 = 1_800_000_000.0  # a whole second


def stamp(at):
    """run.json's stamp of the moment `at`: cut to the second."""
    return datetime.datetime.fromtimestamp(
        int(at), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cell_result(make_cell, moments, status="ok", framework="pytorch",
                warmup=(0.5, 0.5), times=(0.4,) * 5):
    """A schema-valid throughput result whose phases are T0 + moments."""
    cell = make_cell(framework=framework, iterations=len(times),
                     warmup=len(warmup))
    result = blocks.new_result(cell)
    result["environment"].update(provenance.host_environment())
    result["model"] = blocks.model_block(networks.get(cell["network"]),
                                         cell["global_batch_size"])
    result["finished_at"] = blocks.utc_now()
    series = Series()
    series.warmup_s, series.times = list(warmup), list(times)
    series.warmup_loss, series.losses = [1.0] * len(warmup), [1.0] * len(times)
    result["timing"] = blocks.timing_block(series, cell)
    result["loss"] = blocks.loss_block(series)
    result["status"] = status
    if status != "ok":
        result["error"] = {"type": "X", "message": "failed"}
    result["phases"] = dict.fromkeys(harness_phases.THROUGHPUT)
    result["phases"].update((n, T0 + at) for n, at in moments.items())
    assert store.validation_errors(result) == []
    return result


def entry_of(result, start, end, status=None):
    """The run.json entry of a job that ran from T0 + start to T0 + end."""
    return {"id": "job", "spec": dict(result["cell"]),
            "status": status or result["status"],
            "started_at": stamp(T0 + start), "finished_at": stamp(T0 + end),
            "wall_s": end - start, "message": None}


OK = {"process_start": 1.0, "harness_ready": 2.0, "device_ready": 2.5,
      "framework_imported": 5.0, "model_built": 6.0, "warmup_done": 7.0,
      "timed_done": 9.0, "result_written": 9.5}


def shifted(moments, by):
    return {n: at + by for n, at in moments.items()}


def test_a_jobs_window_lies_within_its_stamps_and_before_its_process(
        make_cell):
    result = cell_result(make_cell, OK)
    start, end = phases.job_window(entry_of(result, 0.2, 10.2),
                                   result["phases"])
    assert T0 <= start <= T0 + 1.0 and end == pytest.approx(start + 10.0)
    assert end >= T0 + OK["result_written"]


def test_each_stretch_is_named_after_the_phase_that_ended_it(make_cell):
    result = cell_result(make_cell, OK)
    spent = phases.job_spent(entry_of(result, 0.2, 10.2), result)
    assert sum(spent.values()) == pytest.approx(10.0)
    assert spent["interpreter"] == pytest.approx(1.0)
    assert spent["device"] == pytest.approx(0.5)
    assert spent["import"] == pytest.approx(2.5)
    assert spent["model build"] == pytest.approx(1.0)
    assert spent["warm-up"] == pytest.approx(1.0)
    assert spent["timed"] == pytest.approx(2.0)
    # What the window leaves: before the process, after the write began.
    assert spent["before the process"] + spent["write, exit and collect"] == \
        pytest.approx(10.0 - 8.0)


def test_a_failed_job_spends_its_end_in_the_phase_it_failed_in(make_cell):
    reached = {n: OK[n] for n in ("process_start", "harness_ready",
                                  "device_ready")}
    reached["result_written"] = 6.5
    result = cell_result(make_cell, reached, status="error")
    spent = phases.job_spent(entry_of(result, 0.2, 7.0), result)
    assert spent["import"] == pytest.approx(4.0)
    assert "write, exit and collect" in spent and "timed" not in spent


def test_the_sweep_fraction_counts_the_gaps_between_jobs(make_cell):
    first = cell_result(make_cell, OK)
    second = cell_result(make_cell, shifted(OK, 15.0))
    pairs = [(entry_of(first, 0.2, 10.2), first),
             (entry_of(second, 15.2, 25.2), second)]
    (sweep,) = phases.sweeps(pairs)
    assert sweep.wall_s == pytest.approx(25.0, abs=1.0)
    assert sweep.spent[phases.GAPS] == pytest.approx(5.0, abs=1.0)
    assert sweep.measured_s == pytest.approx(6.0)
    assert sweep.fraction == pytest.approx(6.0 / sweep.wall_s)
    assert sweep.fixed_s == pytest.approx([7.0, 7.0])
    assert sum(sweep.spent.values()) == pytest.approx(sweep.wall_s)


def test_each_framework_has_its_own_sweep(make_cell):
    torch = cell_result(make_cell, OK)
    jax = cell_result(make_cell, shifted(OK, 10.0), framework="jax")
    late = cell_result(make_cell, shifted(OK, 20.0))
    pairs = [(entry_of(torch, 0.2, 10.2), torch),
             (entry_of(jax, 10.2, 20.2), jax),
             (entry_of(late, 20.2, 30.2), late)]
    by_name = {s.framework: s for s in phases.sweeps(pairs)}
    assert by_name["jax"].wall_s == pytest.approx(10.0)
    assert by_name["pytorch"].spent[phases.OTHERS] == pytest.approx(
        10.0, abs=1.0)
    # The jax job between PyTorch's two counts against neither's fraction.
    assert by_name["pytorch"].fraction == pytest.approx(
        by_name["jax"].fraction, rel=0.1)
    line = "\n".join(phases.summary_lines(pairs))
    assert "other frameworks' jobs between" in line
    assert "rest: other" not in line


def test_a_convergence_runs_training_holds_its_iterations(make_cell):
    result = cell_result(make_cell, {})
    result["phases"] = {"process_start": T0 + 1, "harness_ready": T0 + 2,
                        "data_loaded": T0 + 3, "device_ready": T0 + 3.5,
                        "trained": T0 + 9.0, "result_written": T0 + 9.5}
    assert store.validation_errors(result) == []
    spent = phases.job_spent(entry_of(result, 0.2, 10.2), result)
    assert spent["data"] == pytest.approx(1.0)
    assert spent["warm-up"] == pytest.approx(1.0)
    assert spent["timed"] == pytest.approx(2.0)
    assert spent["training, not iterations"] == pytest.approx(5.5 - 3.0)


def test_results_without_phases_are_skipped_with_a_note(make_cell):
    old = cell_result(make_cell, OK)
    del old["phases"]
    assert store.validation_errors(old) == []
    lines = phases.summary_lines([(entry_of(old, 0.2, 10.2), old)])
    assert "no result here has phase times" in "\n".join(lines)
    new = cell_result(make_cell, shifted(OK, 11.0))
    text = "\n".join(phases.summary_lines(
        [(entry_of(old, 0.2, 10.2), old), (entry_of(new, 11.2, 21.2), new)]))
    assert "1 job without phase times" in text
    assert "pytorch: 14% measured of 21.0 s, 2 jobs" in text


def test_the_summary_names_the_fraction_and_the_rest(make_cell):
    result = cell_result(make_cell, OK)
    lines = phases.summary_lines([(entry_of(result, 0.2, 10.2), result)])
    assert lines[2] == ("  pytorch: 30% measured of 10.0 s, 1 job "
                        "(warm-up 10%, timed 20%)")
    assert lines[3] == ("    rest: import 25%, write, exit and collect 15%, "
                        "model build 10%,")
    # A part is never split across lines.
    assert lines[4] == ("          interpreter 10%, device 5%, "
                        "before the process 5%")
    assert lines[-1].startswith("    fixed cost per ok job: 7.0 s median")
    assert max(len(line) for line in lines) <= 80


def test_process_start_is_read_from_proc(tmp_path):
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(
        "42 (a (b) c) S " + " ".join(["0"] * 18) + " 1234500 0 0\n")
    (tmp_path / "uptime").write_text("20000.00 1.00\n")
    hertz = __import__("os").sysconf("SC_CLK_TCK")
    assert harness_phases.process_start(now=T0, proc=str(tmp_path)) == \
        pytest.approx(T0 - 20000.0 + 1234500 / hertz)
    assert harness_phases.process_start(proc=str(tmp_path / "none")) is None


def test_this_process_started_before_now():
    import time
    started = harness_phases.process_start()
    assert started is not None and started <= time.time()


def test_the_pause_before_a_resume_is_no_part_of_the_sweep(make_cell):
    first = cell_result(make_cell, OK)
    later = cell_result(make_cell, shifted(OK, 3600.0))
    pairs = [(entry_of(first, 0.2, 10.2), first),
             (entry_of(later, 3600.2, 3610.2), later)]
    (sweep,) = phases.sweeps(pairs, [stamp(T0 + 3000.0)])
    assert sweep.wall_s == pytest.approx(20.0, abs=1.0)
    assert sweep.spent[phases.GAPS] == pytest.approx(0.0, abs=1.0)
    (whole,) = phases.sweeps(pairs)
    assert whole.wall_s == pytest.approx(3610.0, abs=1.0)


# --- on the real command line ---------------------------------------------------

def test_bench_and_report_say_where_the_time_went(tmp_path):
    """Two real harness processes (the scripted backend): the end of
    `invoke bench` and `invoke report` both give the measured fraction."""
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--python", SCRIPTED, "--iterations", "3", "--warmup", "1",
                  "--threads", "1", "--network", "fcn5", "--network", "fcn8",
                  "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The interpreter's share in the rest, on its first line or a
    # continuation (PyTorch forks by default: "fork server: interpreter
    # and import" may wrap)
    pattern = (r"\n  pytorch: \d+% measured of [\d.]+ (s|min), 2 jobs "
               r"\(warm-up \d+%, timed \d+%\)\n    rest: [^\n]*"
               r"(\n {10}[^\n]*)*interpreter")
    assert re.search(pattern, proc.stdout), proc.stdout
    proc = invoke("report", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "where the time went (first job start to last job end):" in \
        proc.stdout
    assert re.search(pattern, proc.stdout), proc.stdout
    assert "fixed cost per ok job: " in proc.stdout


def test_report_of_a_run_before_phase_times_says_so():
    proc = invoke("report", "--run",
                  str(ROOT / "tests" / "golden" / "runs" / "bench-v1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "where the time went: no result here has phase times" in \
        proc.stdout


def test_a_real_pytorch_cell_records_its_phases_in_order(tmp_path):
    """One tiny cell of real PyTorch, natively: every phase is stamped, in
    order, inside the job's own window, and importing torch takes time."""
    from dlrepro import matrix
    from dlrepro.images import envs
    m = matrix.load()
    envs.ensure("pytorch", "cpu", m["pytorch"]["cpu"], log=lambda _: None)
    proc = invoke("bench", "--framework", "pytorch", "--runtime", "native",
                  "--network", "fcn5", "--batch-size", "4", "--iterations",
                  "2", "--warmup", "1", "--threads", "1", "--out",
                  str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record, pairs = store.load_run((tmp_path / "latest").resolve())
    ((entry, result),) = pairs
    block = result["phases"]
    stamps = [block[n] for n in harness_phases.THROUGHPUT]
    assert None not in stamps and stamps == sorted(stamps), block
    start, end = phases.job_window(entry, block)
    assert start <= stamps[0] and stamps[-1] <= end
    assert block["framework_imported"] > block["device_ready"]
    assert "1 job (warm-up" in proc.stdout


def slurm_polled(result, start, wall, seen_running=True, node_start=True,
                 key="engine"):
    """A job a Slurm task ran from T0 + start for `wall` seconds, as the
    watcher's polls stamped it in run.json (2 s late each, its start
    unseen when the task's cell ended between two polls); its node side's
    own window in the result's engine block (`node_start`: with its start,
    as node sides record it now; `key`: "slurm" for results before the
    block was engine-neutral)."""
    result.pop("engine", None)
    result.pop("slurm", None)
    result[key] = {"wall_s": wall}
    if node_start:
        result[key]["started_epoch_s"] = T0 + start
    entry = entry_of(result, start + 2.0, start + wall + 2.0)
    if not seen_running:
        entry["started_at"] = None
    entry["wall_s"] = wall
    return entry


@pytest.mark.parametrize("key", ["engine", "slurm"])
def test_a_slurm_jobs_window_is_its_node_sides_not_the_watchers_polls(
        make_cell, key):
    result = cell_result(make_cell, OK)
    entry = slurm_polled(result, 0.2, 10.0, key=key)
    assert phases.window_of(entry, result) == (T0 + 0.2, T0 + 10.2)
    spent = phases.job_spent(entry, result)
    assert spent["interpreter"] == pytest.approx(1.0)
    assert spent["timed"] == pytest.approx(2.0)
    assert spent["before the process"] == pytest.approx(0.8)
    # An older result without the node's start: its wall time around its
    # phases, not after the watcher's late stamps.
    older = slurm_polled(result, 0.2, 10.0, node_start=False, key=key)
    start, end = phases.window_of(older, result)
    assert start <= T0 + OK["process_start"]
    assert end >= T0 + OK["result_written"]
    assert end - start == pytest.approx(10.0)


def test_a_groups_cells_never_seen_running_still_count_in_the_sweep(
        make_cell):
    """Three cells of one Slurm task, the last two ended between two polls
    (no started_at in run.json): every one counts, each over its own
    window, so the sweep is the task's 30 s."""
    pairs = []
    for n in range(3):
        result = cell_result(make_cell, shifted(OK, 10.0 * n))
        pairs.append((slurm_polled(result, 10.0 * n + 0.2, 10.0,
                                   seen_running=n == 0), result))
    (sweep,) = phases.sweeps(pairs)
    assert sweep.jobs == 3 and sweep.unphased == 0
    assert sweep.wall_s == pytest.approx(30.0)
    assert sweep.measured_s == pytest.approx(9.0)
    assert sweep.spent.get(phases.GAPS, 0.0) == pytest.approx(0.0)
