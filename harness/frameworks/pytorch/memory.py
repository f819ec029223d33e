"""What PyTorch lets a group worker free between two cells, and what it
still holds after (the backend's release_memory)."""
import sys

from .. import backends

CPU_NOTE = ("on the CPU PyTorch hands freed tensors back to the C library's "
            "allocator and counts nothing: the process's RSS is what it holds")
GPU_NOTE = ("torch.cuda.empty_cache() returned the caching allocator's unused "
            "blocks to the device; reserved_bytes is what the allocator still "
            "keeps (live tensors and their fragmentation); the CUDA context "
            "itself stays until the process ends")


def _reset_compiled(released):
    # torch.compile's caches outlive their models, and past its recompile
    # limit dynamo runs a new model eagerly: each cell compiles afresh. Only
    # where a cell imported dynamo, whose import costs seconds.
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()
        released.append("torch._dynamo.reset()")


def _gpu_held(torch):
    return [{"index": index,
             "allocated_bytes": int(torch.cuda.memory_allocated(index)),
             "reserved_bytes": int(torch.cuda.memory_reserved(index))}
            for index in range(torch.cuda.device_count())]


def release_memory(device, collect):
    import torch
    released = []
    _reset_compiled(released)
    if device != "gpu":
        return backends.memory_report(released, None, CPU_NOTE)
    # A tensor the cells before left in a reference cycle keeps its block
    # until the worker's collection.
    collect()
    torch.cuda.empty_cache()
    released.append("torch.cuda.empty_cache()")
    return backends.memory_report(released, {"gpus": _gpu_held(torch)},
                                  GPU_NOTE)
