"""Entry point inside a container or a framework's virtual environment.

    python -m harness run --spec SPEC --out RESULT.json
    python -m harness worker < SPEC PATHS (one a line, as JSON strings:
                                          harness.worker)
    python -m harness worker --fork < SPEC PATHS (harness.forkserver)
    python -m harness converge --spec SPEC --out RESULT.json
    python -m harness networks
    python -m harness versions --framework pytorch [--device gpu]
    python -m harness kernels [--module torch] [PATH ...]

SPEC is a JSON file, or `-` for standard input: {"cell": {...},
"container": {...} or null}. Exit status: 0 when a result file was written
(whatever the cell's status), 2 for a spec that is not a valid cell, 143
when terminated (the result file is still written). `worker`: 0 at the end
of its input, 143 (SIGTERM) or 130 (SIGINT) once the cell running then has
its result.
"""
import argparse
import atexit
import json
import os
import sys

from . import frameworks, networks
from .errors import HarnessError
from .throughput import run_cell


def _read_spec(source):
    try:
        if source == "-":
            return json.load(sys.stdin)
        with open(source) as handle:
            return json.load(handle)
    except (IOError, OSError) as exc:
        raise HarnessError("cannot read spec {}: {}".format(source, exc.strerror))
    except ValueError as exc:
        raise HarnessError("spec {} is not valid JSON: {}".format(source, exc))


def _run(args):
    result = run_cell(_read_spec(args.spec), args.out)
    error = result.get("error") or {}
    print("{} {}: {}{}".format(result["cell"]["framework"],
                               result["cell"]["network"], result["status"],
                               " ({})".format(error.get("message"))
                               if error else ""))
    if error.get("type") == "Terminated":
        return 143
    return 0


def _worker(args):
    # Imported here: `run` does not need the group's code.
    from .worker import protocol_stream, serve
    if args.fork:
        from .forkserver import serve
    return serve(sys.stdin, protocol_stream())


def _converge(args):
    # Imported here: the throughput path does not need the convergence code.
    from .converge import run_convergence
    result = run_convergence(_read_spec(args.spec), args.out)
    error = result.get("error") or {}
    print("{} {} x{}: {}{}".format(
        result["cell"]["framework"], result["cell"]["network"],
        result["convergence"]["workers"], result["status"],
        " ({})".format(error.get("message")) if error else ""))
    return 143 if error.get("type") == "Terminated" else 0


def _networks(args):
    print(json.dumps([networks.describe(n) for n in networks.NETWORKS.values()],
                     indent=2, sort_keys=True))
    return 0


def _versions(args):
    backend = frameworks.load(args.framework)
    print(json.dumps(backend.versions(args.device), sort_keys=True))
    return 0


def _kernels(args):
    import importlib.util
    from .gpu import fatbin
    roots = list(args.paths)
    for name in args.module:
        # find_spec locates a package without importing it: the check runs
        # where the framework cannot start (no driver).
        found = importlib.util.find_spec(name)
        if found is None or not found.submodule_search_locations:
            raise HarnessError("no package {} here".format(name))
        roots.extend(found.submodule_search_locations)
    report = fatbin.scan(roots)
    print(json.dumps({"libraries": report, "main": fatbin.main_library(report)},
                     indent=2, sort_keys=True))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m harness")
    commands = parser.add_subparsers(dest="command")
    run = commands.add_parser("run", help="run one cell, write one result")
    run.add_argument("--spec", required=True, help="spec JSON file, or -")
    run.add_argument("--out", required=True, help="result file to write")
    run.set_defaults(func=_run)
    worker = commands.add_parser(
        "worker", help="run the cells whose spec files stdin names, one a "
        "line as a JSON string, in this one process")
    worker.add_argument(
        "--fork", action="store_true", help="run each cell in a child "
        "forked after the framework's import (harness.forkserver)")
    worker.set_defaults(func=_worker)
    converge = commands.add_parser(
        "converge", help="one convergence run (N data-parallel workers)")
    converge.add_argument("--spec", required=True, help="spec JSON file, or -")
    converge.add_argument("--out", required=True, help="result file to write")
    converge.set_defaults(func=_converge)
    listing = commands.add_parser("networks", help="describe the networks")
    listing.set_defaults(func=_networks)
    versions = commands.add_parser("versions", help="framework versions")
    versions.add_argument("--framework", required=True)
    versions.add_argument("--device", default="cpu", choices=("cpu", "gpu"))
    versions.set_defaults(func=_versions)
    kernels = commands.add_parser(
        "kernels", help="GPU architectures of the libraries' fat binaries")
    kernels.add_argument("--module", action="append", default=[],
                         help="a package whose folder to scan (repeatable)")
    kernels.add_argument("paths", nargs="*", help="files or folders to scan")
    kernels.set_defaults(func=_kernels)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_usage(sys.stderr)
        return 2
    try:
        return args.func(args)
    except HarnessError as exc:
        sys.stderr.write("harness: error: {}\n".format(exc))
        return 2


# Commands whose process has nothing left to do once main returns: its
# results are on disk.
QUICK_EXIT = ("run", "worker")


def leave(status):
    """Exit without the interpreter's teardown, which with a framework
    loaded is most of what follows the result (0.5 s with PyTorch, 0.7-1 s
    with TensorFlow, measured on a 2-core CPU: its thread pools, its
    modules' finalizers), and which the host would otherwise wait for
    before the next cell. The atexit handlers still run (a clock session's
    restore, logging's flush); only the finalization is skipped."""
    run_exit_functions = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_functions is None:
        sys.exit(status)
    run_exit_functions()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    status = main()
    if len(sys.argv) > 1 and sys.argv[1] in QUICK_EXIT:
        leave(status)
    sys.exit(status)
