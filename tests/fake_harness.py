"""A harness process with scripted behaviour, for testing the sweep with
real processes, real signals and real timeouts.

    python tests/fake_harness.py MODE --spec SPEC --out RESULT

Modes: ok (the real harness.cell with a scripted backend), slow (the real
harness.cell, one second per iteration: for timeouts and SIGTERM), stubborn
(ignores SIGTERM, never writes), crash (exit 3, no result), kill (SIGKILL
itself, as the OOM killer would), invalid (writes a file that breaks the
schema).
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import backends, cell  # noqa: E402
from tests.fake_backend import Backend, Script  # noqa: E402


class SleepingScript(Script):
    def clock(self):
        return time.monotonic()


def main(mode, spec_path, out):
    spec = json.load(open(spec_path))
    if mode in ("ok", "slow"):
        n = spec["cell"]["warmup"] + spec["cell"]["iterations"]
        if mode == "ok":
            script = Script([0.01] * n)
        else:
            script = SleepingScript([0.0] * n)
            backend_step = Backend(script).prepare

            class Slow(Backend):
                def prepare(self, *args, **kwargs):
                    session = backend_step(*args, **kwargs)
                    step = session.step

                    def slow_step():
                        time.sleep(1.0)
                        return step()
                    session.step = slow_step
                    return session
            backends.load = lambda name: Slow(script)
            cell.run_cell(spec, out, clock=script.clock)
            return 0
        backends.load = lambda name: Backend(script)
        cell.run_cell(spec, out, clock=script.clock)
        return 0
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)
    if mode == "crash":
        sys.stderr.write("boom: the framework crashed\n")
        return 3
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "invalid":
        with open(out, "w") as handle:
            json.dump({"schema_version": 1, "status": "ok"}, handle)
        return 0
    raise SystemExit("unknown mode " + mode)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[3], sys.argv[5]))
