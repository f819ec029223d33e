"""`invoke bench`: suite + flags -> jobs -> the job pipeline -> a run
folder."""
from dlrepro import hostinfo, matrix as matrix_mod
from dlrepro.bench import plan as plan_mod, suites
from dlrepro.errors import NoUsableResult, UserError
from dlrepro.run import pipeline, runfolder


def select_frameworks(m, frameworks, all_frameworks):
    if all_frameworks and frameworks:
        raise UserError("give --framework or --all, not both")
    if all_frameworks:
        return tuple(matrix_mod.frameworks(m))
    if not frameworks:
        raise UserError("choose frameworks: --framework NAME (repeatable) or "
                        "--all; valid frameworks: "
                        f"{', '.join(matrix_mod.frameworks(m))}")
    names = []
    for value in frameworks:
        for name in value.split(","):
            matrix_mod.profiles(m, name)  # raises with the valid names
            names.append(name)
    return tuple(dict.fromkeys(names))


def current_host():
    gpus = tuple(hostinfo.gpus())
    return plan_mod.Host(cpus=hostinfo.usable_cpus(), gpus=len(gpus),
                         gpu_devices=gpus)


def make_plan(suite_name, options, m, host):
    suite = suites.load(suite_name)
    return suite, plan_mod.build(suite, options, m, host)


def run_of(suite, jobs, out, command, resume=False):
    """The pipeline's Run for a bench plan."""
    return pipeline.Run(kind="bench", jobs=jobs, out=out, name=suite["name"],
                        command=command, resume=resume,
                        suite={"name": suite["name"], "path": suite["path"],
                               "description": suite["description"]})


def summary(run_dir, only_ids=None):
    """(record, [(entry, result)]) of a run, in plan order."""
    record, pairs = runfolder.load_run(run_dir)
    if only_ids is not None:
        pairs = [p for p in pairs if p[0]["id"] in only_ids]
    return record, pairs


def load_bench_run(run_dir, what="run"):
    """(record, pairs) of a bench run; a run of another kind is refused in
    one line, since its cells are not bench cells even where their fields
    match (a convergence run's timing covers training epochs)."""
    record, pairs = runfolder.load_run(run_dir)
    if record["kind"] != "bench":
        kind = {"converge": "convergence"}.get(record["kind"], record["kind"])
        raise UserError(f"{what} {run_dir.name} is a {kind} run: "
                        f"invoke compare compares bench runs only; runs of "
                        f"different kinds are not compared")
    return record, pairs


def check_usable(run_dir, pairs):
    """NoUsableResult when no job of the run ended ok."""
    if not any(entry["status"] == "ok" for entry, _result in pairs):
        raise NoUsableResult(f"no job ended ok: {run_dir} holds no usable "
                             f"result")
