"""The real command line as a user types it: the one `invoke` (and its
background twin `start`) every test module runs, with the scripted
harness's modes (tests/fake_harness.py, DLREPRO_FAKE_MODES) when given."""
import os
import subprocess

import processes
from paths import INVOKE, ROOT


def env_for(modes="", env=None):
    """`env` (else this process's environment) with the scripted harness's
    modes: one per network, "" for its defaults."""
    return dict(os.environ if env is None else env, DLREPRO_FAKE_MODES=modes)


def invoke(*args, modes="", env=None, timeout=600):
    # SIGINT at its default: a fake mode interrupts the sweep, and a runner
    # started in the background would hand the sweep SIGINT ignored.
    return subprocess.run([INVOKE, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout,
                          env=env_for(modes, env),
                          preexec_fn=processes.sigint_at_default)


def start(*args, modes="", env=None):
    """`invoke` in a session of its own, ended when the test ends if it is
    still running."""
    return processes.start([INVOKE, *args], cwd=ROOT,
                           env=env_for(modes, env), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
