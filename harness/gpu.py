"""GPU inventory and clock policy (observe-only until the clock-control work
lands; see issue 5). Uses nvidia-ml-py (`import pynvml`) when present."""

CLOCK_POLICIES = ("observe",)


def _nvml():
    try:
        import pynvml  # the nvidia-ml-py distribution
    except ImportError:
        return None
    return pynvml


def clock_block(policy, device):
    """The `gpu_clocks` block of a result for a cell on `device`."""
    if device != "gpu":
        return {"policy": policy, "applicable": False,
                "reason": "CPU cell: GPU clocks do not apply", "gpus": []}
    return {"policy": policy, "applicable": True,
            "reason": "observe only: clocks read, nothing changed",
            "gpus": []}
