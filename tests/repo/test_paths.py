"""The run folder's names are written once, in dlrepro/run/paths.py: a
suffix of a job's file spelled anywhere else in dlrepro/ is a second
owner of the layout, which the next change of it would miss."""
import re

from dlrepro.run import paths as run_paths
from dlrepro.run.paths import JobPaths
from paths import ROOT

SUFFIXES = (run_paths.SPEC, run_paths.INVALID, run_paths.CLOCK_STATE,
            run_paths.WORKER_LOG)
# A job's result or log named from its id: f"{job.id}.json",
# f"{job_id}.log", f"{entry['id']}.json" and the like.
NAMED_FROM_ID = re.compile(r"""\{[^{}]*id[^{}]*\}\.(json|log)\b""")


def _code_lines(path):
    """The lines of a module that are code, not its docstrings or
    comments: a docstring may show the layout to a reader."""
    text = path.read_text()
    text = re.sub(r'"""(.|\n)*?"""', lambda m: "\n" * m.group(0).count("\n"),
                  text)
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip():
            yield number, code


def test_no_module_but_paths_spells_a_job_files_name():
    found = []
    for path in sorted((ROOT / "dlrepro").rglob("*.py")):
        # paths.py owns the names; flaghelp.py's help may show one to a
        # user, as a docstring may to a reader.
        if path in (ROOT / "dlrepro" / "run" / "paths.py",
                    ROOT / "dlrepro" / "flaghelp.py"):
            continue
        for number, code in _code_lines(path):
            if any(s in code for s in SUFFIXES) or NAMED_FROM_ID.search(code):
                found.append(f"{path.relative_to(ROOT)}:{number}: "
                             f"{code.strip()}")
    assert found == []


def test_the_check_finds_a_name_spelled_outside():
    # The two patterns above catch what the modules wrote before paths.py.
    for line in ('path = run_dir / f"{job.id}.json"',
                 'log = Path(run_dir) / f"{job_id}.log"',
                 'kept = path.with_suffix(".invalid.json")',
                 'name = f"{entry[\'id\']}.json"'):
        assert any(s in line for s in SUFFIXES) or NAMED_FROM_ID.search(line)


def test_a_jobs_names():
    job = JobPaths("/r/run", "pytorch-cpu-fcn5-cpu-b64-t2")
    assert str(job.result) == "/r/run/pytorch-cpu-fcn5-cpu-b64-t2.json"
    assert str(job.spec) == "/r/run/pytorch-cpu-fcn5-cpu-b64-t2.spec.json"
    assert str(job.log) == "/r/run/pytorch-cpu-fcn5-cpu-b64-t2.log"
    assert str(job.invalid) == \
        "/r/run/pytorch-cpu-fcn5-cpu-b64-t2.invalid.json"
    assert str(JobPaths.invalid_of(job.result)) == str(job.invalid)
    assert str(job.side(2)) == \
        "/r/run/nodes/pytorch-cpu-fcn5-cpu-b64-t2.node2.json"
    assert JobPaths.first_of_worker_log(job.worker_log) == job.job_id
    assert run_paths.seen_in("/results", "j") == {
        "spec": "/results/j.spec.json", "result": "/results/j.json"}
