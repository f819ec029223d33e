"""Initial weights drawn on the host with numpy, for the backends whose own
generators made their model build the slowest (TensorFlow, MXNet, JAX, and
CNTK's dense and embedding layers).

The distributions are harness.networks': Glorot-uniform, limit
sqrt(6 / (fan_in + fan_out)), and uniform(-0.05, 0.05) embeddings. Each
layer draws from its own key, a numpy SeedSequence spawned from the cell's
seed in the order the network's layers are translated, with numpy's default
generator (PCG64): deterministic per seed and platform, and one pass over
memory that no framework has touched yet. Why not the frameworks' own: for
fcn5's 118M weights on one core they cost 2-4 passes (a zeroed buffer, the
draw, a scale, a copy into the parameter) and generators 2-3x slower than
numpy's; on a VM whose pages are touched for the first time, each pass over
fresh memory cost as much as the draw itself.

The buffer is 64-byte aligned, so that JAX (PJRT's CPU client) and
TensorFlow (through DLPack) can take it as it is instead of copying it. A
large one is a private anonymous mapping of its own, in 4 KiB pages as
PyTorch's are: numpy asks for transparent huge pages for its large arrays
(MADV_HUGEPAGE), and where the kernel compacts memory for them on demand
(defrag "madvise", a page cache filling the RAM) fcn5's build took 2-3x
the wall time in stalls (TensorFlow: 22-31 s against 11-12 s on a loaded
2-core VM, minor faults 4,100 against 117,600). Private, not shared:
a shared anonymous mapping is shared memory, whose pages cost more to
fault in (fcn5's 118M values drawn: 0.54-0.61 s shared, 0.45-0.50 s
private on the 2-core VM); huge pages are refused outright where Python
can say so (mmap.madvise, 3.8 and newer), for kernels that give them
unasked.

A draw is made and scaled a cache-sized chunk at a time: the same values
as one draw of the whole followed by three passes over it, in one pass
over memory (about 0.04 s of fcn5's 0.45-0.50 s;
docs/measurements/fixed-costs-2026-12-06). An array of at least two SPANs
draws each span from a key of its own (the layer key's children, in
order), and the cell's threads share the spans (side_by_side): numpy's
generators draw without the GIL, so the draws and the faults of fresh
pages run on every core the cell has (fcn5's 118M values on two cores:
0.31-0.39 s against 0.62-0.85 s in one thread). The values depend on the
key alone, not on how many threads drew them.
"""
import math
import mmap
import os
import threading

from .. import threads as cell_threads

# XLA's and Eigen's alignment: a CPU buffer so aligned is used without a
# copy.
ALIGNMENT = 64
# From this size on a buffer is mapped on its own (numpy madvises huge
# pages from 4 MiB).
MAPPED_BYTES = 1 << 22
# Values drawn and scaled at a time: 1 MiB, within any L2 cache.
CHUNK = 1 << 18
# Values a key of their own draws in a large array: 4 MiB, a thread's
# share of the pages to fault in.
SPAN = 1 << 20


def _np():
    # numpy comes with every framework that uses this module; importing it
    # here keeps harness.frameworks importable without it (PyTorch's lock
    # has no numpy).
    import numpy
    return numpy


def keys(seed):
    """The root key of a network's initial draws: spawn() a child a
    layer."""
    return _np().random.SeedSequence(seed)


def aligned_empty(shape, dtype="float32"):
    """An uninitialised C-contiguous array whose data starts on an
    ALIGNMENT-byte boundary."""
    np = _np()
    dtype = np.dtype(dtype)
    count = 1
    for d in shape:
        count *= int(d)
    size = count * dtype.itemsize
    if size >= MAPPED_BYTES:
        # Page-aligned; unmapped when the last array over it goes.
        return np.frombuffer(_mapping(size), dtype=dtype).reshape(
            tuple(shape))
    raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(tuple(shape))


def _mapping(size):
    """`size` bytes of private anonymous memory, no page touched yet."""
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    # Python 3.8 and newer only; the images' 3.6 leaves the kernel's choice.
    advise = getattr(buffer, "madvise", None)
    no_huge_pages = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if advise is not None and no_huge_pages is not None:
        advise(no_huge_pages)
    return buffer


def uniform(key, shape, limit, out=None):
    """float32 values in [-limit, limit]: in `out` (a writable C-contiguous
    float32 array of `shape`) when given, else in a new aligned array
    (aligned_empty)."""
    np = _np()
    bound = np.float32(limit)
    if float(bound) > limit:  # rounded up: the next float32 towards zero
        bound = np.nextafter(bound, np.float32(0))
    values = aligned_empty(shape) if out is None else out
    if not values.flags.c_contiguous:
        # reshape(-1) would draw into a copy.
        raise ValueError("draws.uniform draws into C-contiguous memory only")
    flat = values.reshape(-1)
    if flat.size < 2 * SPAN:
        _fill(key, flat, bound)
        return values
    spans = [(span_key(key, index), flat[start:start + SPAN])
             for index, start in enumerate(range(0, flat.size, SPAN))]
    side_by_side(lambda span: _fill(span[0], span[1], bound), spans,
                 workers())
    return values


def _fill(key, flat, bound):
    # u in [0, 1) has 24 bits: 2u - 1 is exact, and scaling a value under 1
    # in magnitude cannot round past the bound. A chunk at a time, each
    # scaled while it is in the cache: the draw is the one pass over fresh
    # memory, and the generator's stream is the same however it is cut.
    np = _np()
    generator = np.random.default_rng(key)
    for start in range(0, flat.size, CHUNK):
        chunk = flat[start:start + CHUNK]
        generator.random(chunk.shape, dtype=np.float32, out=chunk)
        chunk *= np.float32(2)
        chunk -= np.float32(1)
        chunk *= bound


def span_key(key, index):
    """The child `index` of `key`, as its spawn() gives it, without
    spawning: a layer's key draws the same values however often it draws."""
    return _np().random.SeedSequence(
        key.entropy, spawn_key=tuple(key.spawn_key) + (index,),
        pool_size=key.pool_size)


def workers():
    """The cell's threads (harness.threads), else every CPU it may use."""
    count = cell_threads.count()
    if count:
        return count
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


def side_by_side(draw, items, count):
    """draw(item) for every item, `count` threads sharing them (the
    caller's thread one of them); the first exception is raised here."""
    failures = []

    def share(mine):
        try:
            for item in mine:
                draw(item)
        except BaseException as exc:  # raised again in the caller's thread
            failures.append(exc)

    count = max(1, min(count, len(items)))
    helpers = [threading.Thread(target=share, args=(items[i::count],))
               for i in range(1, count)]
    for helper in helpers:
        helper.start()
    share(items[0::count])
    for helper in helpers:
        helper.join()
    if failures:
        raise failures[0]


def glorot_limit(fan_in, fan_out):
    return math.sqrt(6.0 / (fan_in + fan_out))


def glorot(key, shape, fan_in, fan_out, out=None):
    """Glorot-uniform values of `shape` with the description's fans."""
    return uniform(key, shape, glorot_limit(fan_in, fan_out), out)
