"""harness.allocator: glibc's thresholds fixed once per process, and the
heap given back between a worker's cells. Each check runs in a process of
its own: fixing the thresholds is for the rest of a process's life."""
import subprocess
import sys

import pytest

from harness import allocator

MIB = 1024 * 1024

# mallinfo2 (glibc 2.33+): where the process's blocks are, as glibc counts.
PROBE = r"""
import ctypes, sys
sys.path.insert(0, %(root)r)
from harness import allocator

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
        "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
%(body)s
"""


def probe(root, body):
    """The lines a fresh interpreter prints after running `body`."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE % {"root": str(root), "body": body}],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode().split()


needs_glibc = pytest.mark.skipif(allocator.glibc_version() is None,
                                 reason="the C library is not glibc")


@needs_glibc
def test_a_held_process_keeps_a_mid_sized_block_on_its_heap(root):
    # Unheld, a 1 MiB block is above glibc's starting mmap threshold
    # (128 KiB): mapped on its own, unmapped on free, faulted in anew the
    # next time. Held, it comes from the heap, as in a process whose
    # history has raised the threshold.
    body = """
held = allocator.hold() if sys.argv[-1] == "hold" else None
mapped = libc.mallinfo2().hblkhd
block = libc.malloc(%d)
print(libc.mallinfo2().hblkhd - mapped, held and held["mmap_threshold_bytes"])
libc.free(block)
""" % MIB
    mapped, threshold = probe(root, body.replace('sys.argv[-1] == "hold"',
                                                 "False"))
    assert int(mapped) >= MIB and threshold == "None"
    mapped, threshold = probe(root, body.replace('sys.argv[-1] == "hold"',
                                                 "True"))
    assert int(mapped) == 0 and int(threshold) == 32 * MIB


@needs_glibc
def test_a_held_process_gives_a_large_block_the_heap_its_last_one_left(root):
    # 48 MiB, above any mmap threshold glibc takes: unheld, each such
    # block is mapped anew and its pages faulted in, unless the heap has a
    # free chunk for it, which depends on what the process did before.
    # Held (mmap off), the second comes from where the first was freed on
    # the heap, its pages already in: no fault for memory freed.
    body = """
import resource
held = allocator.hold() if sys.argv[-1] == "hold" else None

def touch(size):
    block = libc.malloc(size)
    ctypes.memset(ctypes.c_void_p(block), 1, size)
    return block

libc.free(touch(%d))
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
mapped = libc.mallinfo2().hblkhd
block = touch(%d)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
print(libc.mallinfo2().hblkhd - mapped)
print(held and held["mmap_max"])
""" % (48 * MIB, 48 * MIB)
    faults, mapped, mmap_max = probe(root, body.replace(
        'sys.argv[-1] == "hold"', "True"))
    assert int(mapped) == 0 and mmap_max == "0"
    assert int(faults) < 48 * MIB // 4096 // 100, faults
    faults, mapped, mmap_max = probe(root, body.replace(
        'sys.argv[-1] == "hold"', "False"))
    assert int(mapped) >= 48 * MIB and mmap_max == "None"


@needs_glibc
def test_freed_heap_stays_until_a_worker_gives_it_back(root):
    # 96 MiB freed at the heap's top: glibc's own trimming (at 64 MiB once
    # adapted, 128 KiB fresh) would give it back at the last free; held,
    # the process keeps it until give_back returns it to the kernel. The
    # list that holds them is sized first: grown as they were made, its
    # array (over 512 bytes: from malloc) could land among them, wherever
    # the interpreter's start had left no hole below (it had none when
    # harness/ was imported from .pyc files), and stay live above the
    # freed ones, so that there was no top of the heap to give back.
    body = """
held = allocator.hold() if sys.argv[-1] == "hold" else None
blocks = [None] * 96  # its array made before the blocks, not among them
for index in range(96):
    blocks[index] = libc.malloc(%d)
for block in reversed(blocks):
    libc.free(block)
print(libc.mallinfo2().arena)
print(allocator.give_back())
print(libc.mallinfo2().arena)
""" % MIB
    before, gave, after = probe(root, body.replace(
        'sys.argv[-1] == "hold"', "True"))
    assert int(before) >= 96 * MIB
    assert gave == "True" and int(after) < 4 * MIB
    # Unheld, glibc trimmed it by itself: nothing left for give_back.
    before, _gave, _after = probe(root, body.replace(
        'sys.argv[-1] == "hold"', "False"))
    assert int(before) < 4 * MIB


@needs_glibc
def test_hold_reports_glibc_once_a_process(root):
    first, second = probe(root, """
import json
print(json.dumps(allocator.hold(), sort_keys=True).replace(" ", ""))
print(json.dumps(allocator.hold(), sort_keys=True).replace(" ", ""))
""")
    assert first == second
    assert '"library":"glibc' in first


def test_without_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(allocator, "glibc_version", lambda: None)
    monkeypatch.setattr(allocator, "_held", [])
    assert allocator.hold(libc=object()) is None
    assert allocator.give_back(libc=object()) is None


def test_a_refused_setting_is_recorded_as_unknown(monkeypatch):
    class Refusing(object):
        def mallopt(self, option, value):
            return 0
    monkeypatch.setattr(allocator, "glibc_version", lambda: "glibc 2.36")
    monkeypatch.setattr(allocator, "_held", [])
    assert allocator.hold(libc=Refusing()) == {
        "library": "glibc 2.36", "mmap_threshold_bytes": None,
        "trim_threshold_bytes": None, "mmap_max": None}
