"""python -m harness worker --fork: a fork server, the group worker's
protocol (harness.worker) with a fresh process for every cell.

The server (the parent) pays once what every cell of its process key
would pay alone: the interpreter, the harness and the framework's import
(PRELOAD), after applying what is process-wide and inherited unchanged by
a fork (the thread variables, harness.threads; the allocator's
thresholds, harness.allocator). It never touches a device: no CUDA
context, no JAX backend, no TensorFlow eager context or thread pool, no
NVML session (device_held says so before each fork). For each spec path
it forks a child that runs the cell exactly as `python -m harness run`
does (its own model, warm-up, timing and result file, written the moment
it ends; its own temp dir, harness.celltemp), so no cell inherits what
another built, ran, compiled or freed.

The lines are the worker's, with the child's pid:

    cell-start {"spec": PATH, "pid": CHILD, "worker_pid": SERVER}
    cell-done {"result": PATH, "status": STATUS or null,
               "returncode": the child's exit status (-N: signal N),
               "pid": CHILD}
    cell-invalid {"spec": PATH, "message": TEXT}

The host stops a cell by signalling its child (its timeout), never the
server, which then goes on with the next spec. A child killed (the OOM
killer, SIGKILL) writes no result; its returncode says how it ended and
the host's post-mortem looks for it by its pid. The child gets SIGTERM
when the server dies (as a `run` process does when dlrepro dies), and it
keeps the protocol's pipe open until it exits, so the host reads the
server's end only once the cell's process has ended too.

Before each fork the server checks that it is still safe (fork_refusal):
one thread (a fork copies only the calling thread; a pool's other threads
would be missing in the child with their locks held; FORK_HANDLED names
the one framework whose own threads' fork handlers make them safe), no
device held.
Where it is not, the cell runs as a `run` process of its own (isolation
`cell`), and its result's `fork_refused` says why. SIGTERM or SIGINT to
the server during a cell reach the child, which ends its cell as `run`
does; the server then says `cell-done` and exits (143, 130).
"""
import atexit
import importlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import weakref

from . import allocator, celltemp, collector, phases, procstat, resultfile
from . import threads
from . import worker
from .errors import Terminated
from .gpu import nvml

MODE = "fork"
# What the server imports before its first fork, per framework: the
# framework and what its backend imports on first use, none of which
# starts a thread or touches a device (checked natively by
# tests/harness/test_forkserver.py, in CNTK's and Caffe's images by their
# backends' tests, and by fork_refusal before every fork). PyTorch's
# torch._dynamo is what its first optimizer imports (1.4 s).
# "module:function" imports the module and calls the function: Caffe's
# through its backend's loader, which quiets glog before libcaffe loads
# (glog reads its level then, once).
PRELOAD = {
    "pytorch": ("torch", "torch._dynamo"),
    "jax": ("numpy", "jax", "jax.numpy", "optax"),
    "tensorflow": ("numpy", "tensorflow"),
    "mxnet": ("numpy", "mxnet"),
    "cntk": ("numpy", "cntk"),
    "caffe": ("numpy", "harness.frameworks.caffe.load:_caffe",
              "google.protobuf.text_format"),
}
# Frameworks whose own threads, started at import or by the settling fork,
# have fork handlers of the framework's own that stop them before a fork
# and start them again after it, in the parent and in the child: the
# server may hold as many threads as it held once settled, no more.
# MXNet's engine (pthread_atfork in its initialize.cc: the engine stopped
# in `prepare`, started again in `parent` and `child`; what its
# multiprocessing data loaders rely on): 2 threads after `import mxnet`
# with 2 cell threads, 5 after one fork (tests/harness/test_forkserver.py forks
# it and trains in the child).
FORK_HANDLED = {
    "mxnet": "MXNet's engine threads, which its fork handlers stop before "
             "a fork and start again after it",
}
_settled = {}  # framework -> threads once settled (FORK_HANDLED only)


def run_argv(spec_path, out):
    """`python -m harness run` for a cell the server does not fork."""
    return [sys.executable, "-s", "-m", "harness", "run", "--spec",
            spec_path, "--out", out]


def thread_count(proc="/proc"):
    """Threads of this process, or None where /proc does not say."""
    try:
        return len(os.listdir(os.path.join(proc, "self", "task")))
    except OSError:
        return None


def device_held(framework):
    """Why this process holds a device now (its framework's own check),
    else None. Asked only of a framework already imported: asking must
    not import it."""
    modules = sys.modules
    torch = modules.get("torch")
    if framework == "pytorch" and torch is not None:
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_initialized():
            return "PyTorch has initialized CUDA (torch.cuda.is_initialized())"
    bridge = modules.get("jax._src.xla_bridge")
    if framework == "jax" and bridge is not None:
        if getattr(bridge, "_backends", None):
            return "JAX has started its backends ({})".format(
                ", ".join(sorted(bridge._backends)))
    context = modules.get("tensorflow.python.eager.context")
    if framework == "tensorflow" and context is not None:
        made = getattr(context, "context_safe", lambda: None)()
        if made is not None and getattr(made, "_context_handle", None):
            return "TensorFlow has initialized its eager context"
    return None


def fork_refusal(framework):
    """Why forking now would not be safe, or None."""
    count = thread_count()
    allowed = _settled.get(framework, 1) if framework in FORK_HANDLED else 1
    if count is not None and count > allowed:
        return ("the server runs {} threads{}: a fork copies only one, "
                "and the others' locks would stay held in the child".format(
                    count, "" if allowed == 1 else
                    " ({} of them {})".format(allowed - 1,
                                              FORK_HANDLED[framework])))
    if nvml.sessions_open():
        return "the server holds an NVML session"
    return device_held(framework)


def settle(framework=None):
    """Fork once a child that exits at once: a thread pool with fork
    handlers (OpenBLAS's, started by numpy's import when its thread
    variable asks for more than one thread, which shuts its threads down
    before a fork and starts them again only when next used) is then gone
    from the server, which never uses it; what remains has no handler and
    refuses the fork (fork_refusal), but for a FORK_HANDLED framework's,
    whose count after settling is the most the server may hold. The
    threads before and after."""
    before = thread_count()
    # A FORK_HANDLED framework's handlers may start its threads at the
    # first fork (MXNet's engine, with one cell thread): forked once here,
    # whatever the count, so that the allowance is what every fork finds.
    if before is not None and (before > 1 or framework in FORK_HANDLED):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    after = thread_count()
    if framework in FORK_HANDLED and after is not None:
        _settled[framework] = after
    return {"before": before, "after": after}


def preload(framework):
    """Import the framework's PRELOAD modules; {"modules": imported,
    "failed": {module: error}, "seconds", "threads" (settle's, filled in
    by the server)}. A module that fails to import
    fails the same way in each child, which says so in its result."""
    started = time.time()
    done, failed = [], {}
    for name in PRELOAD.get(framework, ()):
        module, _, loader = name.partition(":")
        try:
            imported = importlib.import_module(module)
            if loader:
                getattr(imported, loader)()
            done.append(name)
        except Exception as exc:  # ImportError, or the framework's own
            failed[name] = "{}: {}".format(type(exc).__name__, exc)
    return {"modules": done, "failed": failed,
            "seconds": round(time.time() - started, 3), "threads": None}


def freeze_heap():
    """Collect, then freeze what is alive out of every later collection
    (Python's advice for a process that forks without exec): a child's
    collections (its settle before the warm-up, those of its steps) then
    walk only what the child made, and never write into the server's
    objects, which would copy every page of the server's heap into the
    child. Walking it took 75 ms of each PyTorch cell's model build on a
    2-core VM (285,000 objects after torch's import); the child's settle
    still ends in the state a process of its own reaches, everything
    alive frozen. The objects frozen; None before Python 3.7."""
    return collector.collect_and_freeze()


def make_ready(framework):
    """What the server does once, before its first fork and after the
    process-wide settings: the framework's import (its preload block,
    with settle's threads), then the heap frozen (freeze_heap's count)."""
    loaded = preload(framework)
    loaded["threads"] = settle(framework)
    return loaded, freeze_heap()


def own_temp_dir():
    """(the server's temp dir, a fresh one for the next cell inside it):
    the cell's, as a process of its own would have one. None for the
    cell's where it cannot be made: the cell then shares the server's,
    and the log says why."""
    shared = tempfile.gettempdir()
    try:
        return shared, celltemp.make(shared)
    except OSError as exc:
        worker.log_warning("no temp dir of its own for the cell ({}): it "
                           "shares the server's".format(exc))
        return shared, None


def returncode(status):
    """os.waitpid's status as Popen's returncode (-N for signal N)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class ForkServer(worker.Worker):
    """The server's state: the settings its first cell fixed, what it
    imported, and the cells it has forked, in order."""

    def __init__(self, protocol, gpu_module=None):
        worker.Worker.__init__(self, protocol, gpu_module)
        self.parent = {"pid": os.getpid(),
                       "process_start": phases.process_start(),
                       "preloaded_at": None, "preload": None,
                       "frozen_objects": None}
        self.ending = None

    def prepare(self, cell):
        """Once, before the first fork: the process-wide settings every
        cell of the key shares, then the framework's import."""
        threads.apply(cell["threads"])
        allocator.hold()
        self.parent["preload"], self.parent["frozen_objects"] = make_ready(
            cell["framework"])
        self.parent["preloaded_at"] = round(time.time(), 3)

    def isolation_block(self):
        return {"mode": MODE, "position": len(self.cells_before) + 1,
                "worker_pid": os.getpid(),
                "cells_before": list(self.cells_before),
                "parent": dict(self.parent)}

    def run_one(self, spec_path):
        """Run the cell of `spec_path` in a child; the server's exit status
        when it must end now (a signal), else None."""
        try:
            out = worker.result_path(spec_path)
            spec, cell = worker.read_spec(spec_path)
        except worker.HarnessError as exc:
            self.say("cell-invalid", spec=spec_path, message=str(exc))
            return None
        settings = worker.process_settings(spec, cell)
        if self.fixed is None:
            self.fixed = settings
            self.prepare(cell)
        isolation = self.isolation_block()
        refusal = worker.mismatch(self.fixed, settings)
        if refusal:
            # No child: the server writes the refusal itself.
            self.say("cell-start", spec=spec_path, pid=None,
                     worker_pid=os.getpid())
            result = worker.write_unrun(spec, cell, out, isolation, {
                "type": "GroupMismatch", "message": refusal})
            self.say("cell-done", result=out, status=result["status"],
                     returncode=0, pid=None)
            return None
        self.cells_before.append(os.path.basename(out)[:-len(".json")])
        unsafe = fork_refusal(cell["framework"])
        shared, temp = own_temp_dir()
        try:
            if unsafe:
                worker.log_warning("not forking: {}; the cell runs in a "
                                   "process of its own".format(unsafe))
                pid = self._spawn(spec_path, out, celltemp.environment(
                    os.environ, shared, temp) if temp else None)
            else:
                pid = self._fork(spec, cell, out, isolation, (shared, temp))
            return self._await(spec_path, pid, out, unsafe)
        finally:
            if temp:
                celltemp.remove(temp)

    def _fork(self, spec, cell, out, isolation, temp):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(self.parent["pid"], spec, cell, out, isolation, temp)
        return pid

    def _spawn(self, spec_path, out, env):
        """The cell as `python -m harness run`: where forking is unsafe."""
        parent = os.getpid()
        proc = subprocess.Popen(
            run_argv(spec_path, out), stdin=subprocess.DEVNULL, stdout=2,
            env=env, preexec_fn=lambda: procstat.die_with_parent(parent))
        return proc.pid

    def _await(self, spec_path, pid, out, unsafe):
        """Wait for the cell's child; its `cell-done` said. The host
        removed any earlier result before it named the spec, so a result
        there now is this child's."""
        self.say("cell-start", spec=spec_path, pid=pid,
                 worker_pid=os.getpid())
        status = self._reap(pid)
        found = None
        try:
            found = resultfile.load(out)
        except Exception:  # none, or torn: the host's collect says which
            pass
        if unsafe and found is not None:
            found = dict(found, isolation={"mode": "cell",
                                           "fork_refused": unsafe})
            resultfile.write_atomic(out, found)
        self.say("cell-done", result=out,
                 status=found.get("status") if found else None,
                 returncode=returncode(status), pid=pid)
        ending, self.ending = self.ending, None
        return {signal.SIGTERM: 143, signal.SIGINT: 130}.get(ending)

    def _reap(self, pid):
        """The child's wait status; a SIGTERM or SIGINT meanwhile is passed
        on to it, and ends the server once the child has ended."""
        def forward(signum, frame):
            self.ending = self.ending or signum
            try:
                os.kill(pid, signum)
            except OSError:
                pass
        previous = [signal.signal(s, forward)
                    for s in (signal.SIGTERM, signal.SIGINT)]
        try:
            while True:
                try:
                    return os.waitpid(pid, 0)[1]
                except InterruptedError:  # Python 3.4: not retried
                    continue
        finally:
            signal.signal(signal.SIGTERM, previous[0])
            signal.signal(signal.SIGINT, previous[1])


def disown_finalizers():
    """The exit finalizers (weakref.finalize) this process inherited from
    the server, left to the server: they finalize the server's objects,
    of which a child holds copies that its exit discards. Those it
    registers itself still run at its exit (multiprocessing's Finalize
    skips a parent's the same way, by pid). PyTorch's import registers
    one a torch.library.Library (174 in PyTorch 2.13), each unregistering
    its kernels from the dispatcher: 30-35 ms of every forked cell's exit
    on the 2-core VM, after its result and before the next cell's fork."""
    # weakref.finalize keeps its live finalizers in this class attribute
    # (Python 3.4 and newer); `atexit` is each finalizer's public switch.
    for finalizer in list(getattr(weakref.finalize, "_registry", ())):
        finalizer.atexit = False


def _child(parent, spec, cell, out, isolation, temp):
    """The forked child: the cell as `run` runs it, in its own temp dir
    (`temp`: the server's and the child's, celltemp), then exit without
    the interpreter's teardown (as `run` leaves, harness.__main__.leave).
    Never returns into the server's loop."""
    phases.forked_now()
    disown_finalizers()
    status = 1
    try:
        if temp[1]:
            celltemp.enter(*temp)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        # SIGTERM when the server dies: an orphaned cell writes what it
        # measured and ends.
        procstat.die_with_parent(parent)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        # A fresh process seeds Python's generator from the system; a
        # child would otherwise draw what its siblings drew.
        random.seed()
        isolation["pid"] = os.getpid()
        _, ending = worker.run_guarded(spec, cell, out, isolation)
        status = worker.EXIT_STATUS.get(ending, 0)
    except (Terminated, KeyboardInterrupt) as exc:
        status = worker.EXIT_STATUS[type(exc).__name__]
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            run_exit_functions = getattr(atexit, "_run_exitfuncs", None)
            if run_exit_functions is not None:
                run_exit_functions()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status)


def serve(commands, protocol, gpu_module=None):
    """Fork a child for each cell named on `commands` until it ends; the
    server's exit status."""
    # Its end_group restores nothing: the server never takes the clocks
    # (a forked child's cell sets its own).
    return worker.serve_cells(commands, ForkServer(protocol, gpu_module))
