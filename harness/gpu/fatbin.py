"""The GPU kernels a shared library carries, read from its CUDA fat binaries.

A framework's wheel says which GPU architectures it was built for only in
its build scripts; the library itself says it exactly. nvcc embeds one fat
binary per translation unit: a 16-byte header (magic 0xBA55ED50, version 1,
header size 16, payload size) followed by entries, each a header (kind: 1
PTX, 2 or 0x10 machine code; its own size; its payload's size; the
architecture number, 90 for sm_90) and its payload. The payloads may be
compressed; the headers never are, so nothing is decompressed here.

The layout follows NVIDIA's fatbinary.h (fatBinaryHeader,
fatBinEntryHeader) as documented by the open re-implementations of
cuobjdump; it has been stable from CUDA 9 to CUDA 13.

Stdlib only (the harness runs inside old images): `python -m harness
kernels PATH...` prints what `scan` finds, as JSON.
"""
import mmap
import os
import struct

MAGIC = struct.pack("<I", 0xBA55ED50)
PTX = 1
MACHINE_CODE = (2, 0x10)
_HEADER = struct.Struct("<IHHQ")       # magic, version, header size, payload
_ENTRY = struct.Struct("<HHIQIIHHI")   # kind, ?, size, payload, ... arch
ELF_MAGIC = b"\x7fELF"


def _entries(data, start, end):
    """(kind, arch) of every entry of the container whose payload spans
    [start, end); None when the bytes are not a well-formed container."""
    found = []
    position = start
    while position + _ENTRY.size <= end:
        kind, _flags, size, payload, _c, _u, _minor, _major, arch = \
            _ENTRY.unpack_from(data, position)
        if not 64 <= size <= 4096 or position + size + payload > end or \
                not 10 <= arch <= 1000:
            return None
        found.append((kind, arch))
        position += size + payload
    return found if found and position == end else None


def containers(data):
    """Every well-formed fat binary container in `data` (bytes or mmap), as
    lists of (kind, arch)."""
    found = []
    position = data.find(MAGIC)
    while position != -1 and position + _HEADER.size <= len(data):
        _magic, version, header, payload = _HEADER.unpack_from(data, position)
        end = position + header + payload
        entries = None
        if version == 1 and header == _HEADER.size and end <= len(data):
            entries = _entries(data, position + header, end)
        if entries is not None:
            found.append(entries)
            position = data.find(MAGIC, end)
        else:
            position = data.find(MAGIC, position + 4)
    return found


def architectures(found):
    """{"sass": [...], "ptx": [...]} of containers `found`: the
    architectures the library was built for, each present in at least half
    of its fat binaries (one per compiled source file), and as
    "sass_partial"/"ptx_partial" those a few sources add on their own
    (PyTorch builds one sm_89 kernel beside its arch list)."""
    counts = {}
    for container in found:
        for key in {_kind(kind, arch) for kind, arch in container}:
            if key[0] != "other":
                counts[key] = counts.get(key, 0) + 1
    result = {"sass": [], "ptx": [], "sass_partial": [], "ptx_partial": []}
    for (kind, arch), count in sorted(counts.items()):
        name = "{}_{}".format("sm" if kind == "sass" else "compute", arch)
        full = 2 * count >= len(found)
        result[kind if full else kind + "_partial"].append(name)
    return result


def _kind(kind, arch):
    return ("sass" if kind in MACHINE_CODE else
            "ptx" if kind == PTX else "other", arch)


def read_file(path):
    """The kernels of one file: {"containers", "entries", "sass", "ptx"};
    None for a file that is not ELF or carries no fat binary."""
    with open(path, "rb") as handle:
        if handle.read(4) != ELF_MAGIC:
            return None
        if os.fstat(handle.fileno()).st_size == 0:
            return None
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            found = containers(data)
        finally:
            data.close()
    if not found:
        return None
    result = {"containers": len(found),
              "entries": sum(len(container) for container in found)}
    result.update(architectures(found))
    return result


def shared_objects(root):
    """Paths of the shared objects under `root` (a file is itself), sorted."""
    if os.path.isfile(root):
        return [root]
    paths = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if ".so" in name and not os.path.islink(os.path.join(folder, name)):
                paths.append(os.path.join(folder, name))
    return sorted(paths)


def scan(roots):
    """{path: read_file(path)} for every shared object under `roots` that
    carries kernels."""
    report = {}
    for root in roots:
        for path in shared_objects(root):
            try:
                kernels = read_file(path)
            except (IOError, OSError, ValueError):
                continue
            if kernels is not None:
                report[path] = kernels
    return report


# NVIDIA's own libraries, which a framework may bundle (CNTK's wheel carries
# cuDNN, cuBLAS, NCCL...): they are not the framework's kernels.
NVIDIA_LIBRARIES = ("libcu", "libnccl", "libnv", "libnpp", "libcaffe2_nvrtc")


def is_nvidia_library(path):
    return os.path.basename(path).startswith(NVIDIA_LIBRARIES)


def main_library(report):
    """The path of the framework's own kernel library (libtorch_cuda.so,
    libCntk.Math...): of the libraries that are not NVIDIA's, the one with
    the most kernel entries."""
    own = [path for path in sorted(report) if not is_nvidia_library(path)]
    if not own:
        return None
    return max(own, key=lambda path: report[path]["entries"])
