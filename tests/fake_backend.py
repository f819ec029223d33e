"""A stand-in framework for testing the harness's cell logic exactly: it
trains nothing, and each `step` advances a fake clock by a scripted time
and returns a scripted loss (or raises a scripted exception)."""
import math

from harness.frameworks import backends

NAME = "fake"
DEVICES = ("cpu",)


class Script:
    def __init__(self, durations, losses=None, raise_at=None, exc=None):
        self.durations = list(durations)
        self.losses = list(losses) if losses else [1.0] * len(durations)
        self.raise_at = raise_at
        self.exc = exc
        self.now = 0.0
        self.calls = 0

    def clock(self):
        return self.now


class Backend:
    """Module-like object with the backend interface."""
    NAME = NAME
    DEVICES = DEVICES
    CAPABILITIES = backends.capabilities()

    def __init__(self, script, parameters=None, oom_types=(MemoryError,)):
        self.script = script
        self.parameters = parameters
        self.oom_types = oom_types

    def versions(self, device):
        return {"framework_version": "0.0-fake", "cuda": None, "cudnn": None,
                "nccl": None}

    def configure(self, threads, device, seed):
        self.threads = threads

    def effective_threads(self):
        return self.threads

    def is_out_of_memory(self, exc):
        return isinstance(exc, self.oom_types)

    def math_mode(self, device):
        return None

    def release_memory(self, device, collect):
        return backends.memory_report([], None, "the fake framework holds "
                                      "nothing")

    def prepare(self, network, batch_size, device, seed, batch=None,
                precision="default", compile_mode=None):
        from harness import networks
        backend = self

        class Session:
            loss_scaling = precision_note = None
            parameters = (backend.parameters if backend.parameters is not None
                          else networks.parameter_count(network))

            def step(self):
                s = backend.script
                s.calls += 1
                if s.raise_at is not None and s.calls == s.raise_at:
                    raise s.exc
                s.now += s.durations.pop(0)
                return s.losses.pop(0)

            def output_shape(self):
                return networks.output_shape(network)

        return Session()


def nan():
    return math.nan
