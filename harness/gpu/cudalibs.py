"""CUDA, cuDNN and NCCL versions read from the libraries a framework has
loaded into this process.

MXNet and CNTK have no Python call that returns these numbers (PyTorch and
TensorFlow do), but both link the NVIDIA libraries dynamically. Once the
framework is imported, the libraries are mapped into the process: we find
them in /proc/self/maps and ask each one for its own version through ctypes
(cudaRuntimeGetVersion, cudnnGetVersion, ncclGetVersion). Nothing here
initialises a CUDA context.

Every lookup also says where its answer came from, so a result can show a
null version together with the reason.
"""
import ctypes
import os

# (key, library name prefix, version function)
LIBRARIES = (
    ("cuda", "libcudart", "cudaRuntimeGetVersion"),
    ("cudnn", "libcudnn", "cudnnGetVersion"),
    ("nccl", "libnccl", "ncclGetVersion"),
)


def loaded_libraries(maps_path="/proc/self/maps"):
    """Paths of the shared objects mapped into this process, in load order
    (empty where /proc is not available)."""
    paths = []
    seen = set()
    try:
        with open(maps_path) as handle:
            for line in handle:
                fields = line.split(None, 5)
                if len(fields) < 6:
                    continue
                path = fields[5].strip()
                if path.startswith("/") and ".so" in path and path not in seen:
                    seen.add(path)
                    paths.append(path)
    except (IOError, OSError):
        return []
    return paths


def find_loaded(prefix, paths):
    """The first path whose file name is `prefix` followed by ".so" or by
    "-" (wheels repaired by auditwheel rename libcudart.so.11.0 to
    libcudart-1a2b3c4d.so.11.0); None when no such library is loaded."""
    for path in paths:
        name = os.path.basename(path)
        if name.startswith(prefix) and name[len(prefix):len(prefix) + 1] in (
                ".", "-"):
            return path
    return None


def cpu_sources():
    """version_sources of a CPU cell: no CUDA library is asked."""
    return dict((key, "cpu cell: not applicable") for key, _prefix, _symbol
                in LIBRARIES)


def format_cuda(code):
    """cudaRuntimeGetVersion's 11020 -> "11.2" (1000 x major + 10 x minor)."""
    return "{}.{}".format(code // 1000, code % 1000 // 10)


def _major_minor_patch(code):
    # 1000 x major + 100 x minor + patch, or, once the minor reached two
    # digits, 10000 x major + 100 x minor + patch.
    if code >= 10000:
        return "{}.{}.{}".format(code // 10000, code // 100 % 100, code % 100)
    return "{}.{}.{}".format(code // 1000, code // 100 % 10, code % 100)


def format_cudnn(code):
    """cudnnGetVersion's 7301 -> "7.3.1" and, from cuDNN 9 on, 90100 ->
    "9.1.0"."""
    return _major_minor_patch(code)


def format_nccl(code):
    """ncclGetVersion's 2708 -> "2.7.8" and, from NCCL 2.9 on, 21212 ->
    "2.12.12"."""
    return _major_minor_patch(code)


def _call(library, symbol):
    """Ask `library` (a loaded ctypes.CDLL) for its version; None if the
    symbol is absent or the call fails."""
    try:
        function = getattr(library, symbol)
    except AttributeError:
        return None
    if symbol == "cudnnGetVersion":
        function.restype = ctypes.c_size_t
        function.argtypes = []
        return int(function())
    value = ctypes.c_int(0)
    function.restype = ctypes.c_int
    if function(ctypes.byref(value)) != 0:
        return None
    return value.value


_FORMATS = {"cuda": format_cuda, "cudnn": format_cudnn, "nccl": format_nccl}


def library_versions(fallback=None, paths=None):
    """({"cuda", "cudnn", "nccl"} -> version or None, {same keys -> how it
    was read or why it is missing}).

    `fallback` is the path of the framework's own library, asked for the
    symbol when the NVIDIA library is not a separate mapping (linked
    statically into it with its symbols exported).
    """
    if paths is None:
        paths = loaded_libraries()
    versions, sources = {}, {}
    for key, prefix, symbol in LIBRARIES:
        versions[key] = None
        loaded = find_loaded(prefix, paths)
        reasons = [] if loaded else ["no {} is loaded in this process".format(
            prefix)]
        for path in [p for p in (loaded, fallback) if p]:
            try:
                code = _call(ctypes.CDLL(path), symbol)
            except OSError as exc:
                reasons.append("cannot open {}: {}".format(path, exc))
                continue
            if code:
                versions[key] = _FORMATS[key](code)
                sources[key] = "{}() in {}".format(symbol, path)
                break
            reasons.append("{} has no working {}()".format(path, symbol))
        if versions[key] is None:
            sources[key] = "; ".join(reasons)
    return versions, sources


def fill_from_loaded(found, sources):
    """(found, sources) with the CUDA, cuDNN and NCCL versions a framework
    did not report taken from the libraries this process loaded."""
    missing = [k for k in ("cuda", "cudnn", "nccl") if k not in found]
    if missing:
        loaded, reasons = library_versions()
        for key in missing:
            found[key] = loaded[key]
            sources[key] = reasons[key]
    return found, sources
