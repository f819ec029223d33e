"""What CNTK lets a group worker free between two cells: nothing it can be
asked for (the backend's release_memory)."""
from .. import backends

release_memory = backends.nothing_to_release(
    "CNTK's Python API has no call that frees or counts memory: a model's "
    "parameters")
