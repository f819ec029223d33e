"""The native runtime: the harness in a per-framework virtual environment
(or one interpreter the user names with --python)."""
import os
import shutil
import subprocess

from harness import celltemp

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.errors import UserError
from dlrepro.images import envs
from dlrepro.run import oomkills
from dlrepro.run.runtimes import Death, Launch, Runtime as Base, harness_args
from dlrepro.run.runtimes.tempdirs import TempDirs


class Runtime(Base):
    name = "native"

    def __init__(self, matrix=None, venvs_dir=envs.VENVS_DIR, python=None,
                 **_options):
        self.matrix = matrix if matrix is not None else matrix_mod.load()
        self.venvs_dir = venvs_dir
        # An existing interpreter to use for every framework (e.g. a GPU
        # machine's own PyTorch) instead of the locked environments.
        self.python = python
        self.pythons = {}
        self.watches = oomkills.Watches()
        self.temp_dirs = TempDirs()

    def check(self):
        if self.python is None:
            return
        found = shutil.which(self.python)
        if found is None:
            raise UserError(f"--python {self.python}: "
                            f"{_why_not_a_program(self.python)}")
        try:
            subprocess.run([found, "-c", "import sys; sys.exit(sys.version_info"
                            " < (3, 6))"], check=True, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            raise UserError(f"--python {self.python}: does not run as "
                            f"Python 3.6 or newer")
        self.python = found

    def prepare(self, targets, log=print):
        reasons = {}
        for framework, profile in targets:
            entry = matrix_mod.entry(self.matrix, framework, profile)
            if self.python:
                self.pythons[(framework, profile)] = self.python
                reasons[(framework, profile)] = None
                continue
            reasons[(framework, profile)] = envs.unavailable_reason(
                entry, framework, profile)
        if not self.python:  # the environments to make, side by side
            self.pythons.update(envs.ensure_all(
                [t for t, reason in reasons.items() if reason is None],
                self.matrix, log=log, root=self.venvs_dir))
        return reasons

    def describe(self, target):
        return None

    def launch(self, job, run_dir):
        python = self.pythons[job.placement.target]
        # What a framework compiles is cached under the cell's temp dir,
        # empty at its start, as in a container: not where a variable of
        # the caller's would keep it across cells and runs.
        env = celltemp.without_caches(os.environ)
        # The repository's harness, not any installed copy.
        env["PYTHONPATH"] = str(ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        env["TMPDIR"] = self.temp_dirs.make(job.id)
        watch = self.watches.start(job.id)
        return Launch(argv=[str(python)] + harness_args(job, run_dir),
                      env=env, cwd=str(ROOT),
                      post_mortem=lambda pid=None: Death(*watch.verdict(pid)))

    def cleanup(self, job, run_dir):
        self.watches.end(job.id)
        self.temp_dirs.remove(job.id)

    def worker_launch(self, job, run_dir, launch):
        # The worker outlives its first job's cleanup: a folder of its own,
        # which a fork server's children share.
        worker = super().worker_launch(job, run_dir, launch)
        return worker._replace(env=dict(
            worker.env, TMPDIR=self.temp_dirs.make(("worker", job.id))))

    def worker_cleanup(self, job, run_dir):
        self.temp_dirs.remove(("worker", job.id))


def _why_not_a_program(name):
    """Why `name` is not a program to run, when shutil.which finds none."""
    if os.sep not in name or not os.path.exists(name):
        return "no such interpreter"
    if not os.path.isfile(name):
        return "is not a regular file"
    return "is not executable"
