"""The C allocator held in one state for every cell, whatever ran before it.

glibc's malloc adapts to a process's history: its mmap threshold starts at
128 KiB and rises to the size of each mmapped block freed (up to 32 MiB on
64-bit), and its trim threshold follows at twice that. A fresh process
therefore gives memory back to the kernel after each training step and
faults it in again on the next (lstm32 at batch 8: 20 MB, 5,000 page
faults a step; alexnet-r: 6,300 in 5 steps, 7-12% of its step time),
while a worker whose earlier cells freed large blocks has stopped doing
so. Measured on PyTorch 2.13, 2-core CPU: a cell timed after others in one
process was 6-12% faster than the same cell in a process of its own, with
no page faults in its timed steps against thousands; with the thresholds
fixed in both and the worker's heap trimmed between cells, the two agree
within 1-3% (docs/measurements/isolation-2026-12-02).

So every cell's process fixes the mmap threshold before the framework
loads, at the value glibc itself reaches once a process has freed a
32 MiB block, and turns glibc's own trimming off (trim threshold -1 to
mallopt, SIZE_MAX in glibc); a worker trims the heap between cells
(`give_back`), so that each cell starts from a heap holding next to
nothing, as a fresh process does. Trimming off, not at the 64 MiB glibc
would adapt to: lstm64 at batch 8 frees ~80 MB at the heap's top at once,
so with 64 MiB a fresh process still gave it back and faulted it in again
every few steps (strace: brk down by 78 MB, then up again in 20 MB steps;
10,000-28,000 faults in 8 steps against 5,000-12,500 with trimming off),
and whether it did depended on where earlier cells had left live blocks
on the heap. No cell's process gives heap memory back during the cell
now; it does at exit or, in a worker, before the next cell.

Fixing the thresholds left one history in place: a block at or above the
mmap threshold is mapped anew, and faulted in page by page, only when the
heap has no free chunk large enough for it; when it has one, the block
comes from the heap with its pages already in. Which a step met depended
on the heap its process happened to have. PyTorch's fcn-r at batch 16
allocates a 32 MiB gradient every step: six processes alike but for that
averaged 4,600 to 8,300 faults a step and 48 to 60 ms a step, and under
fork it ran 0.915 [0.869, 0.963] as long as under cell
(docs/measurements/allocator-2026-12-06). So mmap is off (M_MMAP_MAX
0): every block comes from the heap, which grows to the cell's peak in its
warm-up and, trimming off, stays. No timed step then faults for memory
its cell freed, in any process or mode (0 to 500 faults a step, 40 to 43
ms; fork/cell 0.968 [0.919, 1.019]): the state that an allocator which
keeps freed memory (jemalloc, tcmalloc: the usual advice for PyTorch on
CPUs) gives, and the one a default glibc process reaches only by chance.
Where the heap cannot grow, glibc still maps a block as its fallback.
Elsewhere (musl, macOS) nothing is set and the result says so (null).
"""
import ctypes
import os

MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
TRIM_OFF = -1  # mallopt(3): "disables trimming completely"
# What glibc then holds (size_t), and the result records.
TRIM_OFF_BYTES = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1
_M_TRIM_THRESHOLD = -1  # malloc.h
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
MMAP_MAX = 0  # no block mapped on its own: all from the heap

_held = []  # the block `hold` returned, once per process


def glibc_version():
    """'glibc 2.36', or None where the C library is not glibc."""
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        return None
    return version if version and version.startswith("glibc") else None


def _libc():
    return ctypes.CDLL(None)


def hold(libc=None):
    """Fix glibc's thresholds for the rest of this process (once; later
    calls return the same). Returns the result's environment.allocator
    block, or None where there is no glibc to set."""
    if _held:
        return dict(_held[0])
    version = glibc_version()
    if version is None:
        return None
    libc = libc or _libc()
    # mallopt returns 1 on success; a fixed value also stops the adapting.
    set_ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and
              libc.mallopt(_M_TRIM_THRESHOLD, TRIM_OFF) == 1)
    mmap_off = libc.mallopt(_M_MMAP_MAX, MMAP_MAX) == 1
    block = {"library": version,
             "mmap_threshold_bytes": MMAP_THRESHOLD if set_ok else None,
             "trim_threshold_bytes": TRIM_OFF_BYTES if set_ok else None,
             "mmap_max": MMAP_MAX if mmap_off else None}
    _held.append(block)
    return dict(block)


def give_back(libc=None):
    """Return the heap's free memory to the kernel (malloc_trim(0)), as a
    worker does between cells. True when memory was released, False when
    there was none to release, None without glibc."""
    if glibc_version() is None:
        return None
    return bool((libc or _libc()).malloc_trim(0))
