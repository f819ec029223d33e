"""What CNTK lets a group worker free between two cells: nothing it can be
asked for (the backend's release_memory)."""
from .. import backends

NOTE = ("CNTK's Python API has no call that frees or counts memory: a "
        "model's parameters go with its last reference (the worker then "
        "collects Python's garbage); the process's RSS is what it holds")


def release_memory(device, collect):
    return backends.memory_report([], None, NOTE)
