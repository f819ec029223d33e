"""fcn5's 118M initial values drawn into a fresh anonymous mapping, four
ways, three rounds: shared (what harness/frameworks/draws.py mapped before)
or private, without or with MAP_POPULATE, each drawn whole (one draw, then
three passes to scale) or a 1 MiB chunk at a time; seconds from the mapping
to the scaled values.
    .venvs/jax-cpu/bin/python mapping_probe.py"""
import mmap
import time

import numpy as np

N = 118_000_000
POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)
CHUNK = 1 << 18
CASES = {"shared": mmap.MAP_SHARED | mmap.MAP_ANONYMOUS,
         "shared+populate": mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | POPULATE,
         "private": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
         "private+populate": mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | POPULATE}


def draw(buffer, chunk):
    values = np.frombuffer(buffer, dtype=np.float32)
    generator = np.random.default_rng(1)
    chunk = chunk or values.size
    for start in range(0, values.size, chunk):
        part = values[start:start + chunk]
        generator.random(part.shape, dtype=np.float32, out=part)
        part *= np.float32(2)
        part -= np.float32(1)
        part *= np.float32(0.01)
    return values


for _ in range(3):
    row = []
    for name, flags in CASES.items():
        for chunk in (None, CHUNK):
            start = time.perf_counter()
            buffer = mmap.mmap(-1, N * 4, flags=flags)
            values = draw(buffer, chunk)
            row.append("{}{} {:.3f}".format(name, "/chunk" if chunk else "",
                                            time.perf_counter() - start))
            del values
            buffer.close()
    print(" | ".join(row))
