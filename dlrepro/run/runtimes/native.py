"""The native runtime: the harness in a per-framework virtual environment."""
import os

from dlrepro import ROOT, matrix as matrix_mod
from dlrepro.images import envs
from dlrepro.run.runtimes import Launch


class Runtime:
    name = "native"

    def __init__(self, matrix=None, venvs_dir=envs.VENVS_DIR, python=None,
                 **_options):
        self.matrix = matrix if matrix is not None else matrix_mod.load()
        self.venvs_dir = venvs_dir
        # An existing interpreter to use for every framework (e.g. a GPU
        # machine's own PyTorch) instead of the locked environments.
        self.python = python
        self.pythons = {}

    def check(self):
        pass

    def prepare(self, targets, log=print):
        reasons = {}
        for framework, profile in targets:
            entry = matrix_mod.entry(self.matrix, framework, profile)
            if self.python:
                self.pythons[(framework, profile)] = self.python
                reasons[(framework, profile)] = None
                continue
            reason = envs.unavailable_reason(entry, framework, profile)
            if reason is None:
                self.pythons[(framework, profile)] = envs.ensure(
                    framework, profile, entry, log=log, root=self.venvs_dir)
            reasons[(framework, profile)] = reason
        return reasons

    def describe(self, framework, profile):
        """What results record as `container` for native runs: nothing."""
        return None

    def launch(self, cell, run_dir, cell_id):
        python = self.pythons[(cell["framework"], cell["profile"])]
        env = dict(os.environ)
        # The repository's harness, not any installed copy.
        env["PYTHONPATH"] = str(ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        return Launch(
            argv=[str(python), "-s", "-m", "harness", "run",
                  "--spec", str(run_dir / f"{cell_id}.spec.json"),
                  "--out", str(run_dir / f"{cell_id}.json")],
            env=env, cwd=str(ROOT))
