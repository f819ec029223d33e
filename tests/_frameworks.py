"""Framework environments for tests that run framework code: the same
.venvs/<framework>-cpu that `invoke env` makes from the lock files, created
on first use (never skipped: CI makes them too); for CNTK, which has no
native environment, its image's Python (tests/cntkenv.py); likewise Caffe
(tests/caffeenv.py)."""
import pytest

import caffeenv
import cntkenv
from dlrepro import matrix
from dlrepro.images import envs


@pytest.fixture(scope="session")
def framework_python():
    made = {}

    def python(framework):
        if framework == "cntk":
            return cntkenv.python()
        if framework == "caffe":
            return caffeenv.python()
        if framework not in made:
            m = matrix.load()
            made[framework] = envs.ensure(framework, "cpu",
                                          matrix.entry(m, framework, "cpu"),
                                          log=lambda message: None)
        return made[framework]
    return python


@pytest.fixture(scope="session")
def jax_python(framework_python):
    return str(framework_python("jax"))
