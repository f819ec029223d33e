"""The harness's exception types, the error for an unknown name, and the one
rule for what `oom` means."""


class HarnessError(Exception):
    """Bad input or an impossible request: the entry point prints the
    message on one line and exits with status 2."""


class Unsupported(HarnessError):
    """This cell cannot run on this stack; its status is `unsupported`."""


def named(table, name, kind):
    """table[name], or a HarnessError that lists the valid names: "unknown
    network 'x'; valid networks: ..." for `kind` "network"."""
    try:
        return table[name]
    except KeyError:
        raise HarnessError("unknown {} {!r}; valid {}s: {}".format(
            kind, name, kind, ", ".join(sorted(table))))


class Terminated(BaseException):
    """SIGTERM arrived (the host's timeout, docker stop)."""


# Words every framework's device-allocation failure carries: PyTorch's "CUDA
# out of memory", TensorFlow's "OOM when allocating tensor ... on
# /device:GPU:0 by allocator GPU_0_bfc", MXNet's "cudaMalloc retry failed:
# out of memory", CNTK's "CUDA failure 2: out of memory ; GPU=0". Host
# allocation failures name no device (PyTorch: "DefaultCPUAllocator: can't
# allocate memory", TensorFlow: "by allocator cpu", MXNet: "Failed to
# allocate CPU Memory", CNTK: "bad_alloc").
_DEVICE_WORDS = ("cuda", "gpu", "cudnn", "cublas")
_SHORTAGE_WORDS = ("out of memory", "oom when allocating", "failed to allocate",
                   "resource exhausted", "resource_exhausted")


def device_out_of_memory(exc):
    """Whether `exc` says the device (the GPU) ran out of memory. A host
    allocation failure, Python's bare MemoryError included, is not: the
    machine ran short, which says nothing about whether the cell fits the
    device."""
    text = str(exc).lower()
    return (any(word in text for word in _SHORTAGE_WORDS)
            and any(word in text for word in _DEVICE_WORDS))
