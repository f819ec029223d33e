"""Where a result came from: host, software versions and the harness itself."""
import hashlib
import os
import platform
import socket
import sys

from . import HARNESS_VERSION

HARNESS_ROOT = os.path.dirname(os.path.abspath(__file__))


def harness_digest(root=HARNESS_ROOT):
    """SHA-256 over the harness's source files (paths and bytes), so a result
    proves which harness produced it, e.g. the one mounted into a container."""
    digest = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith((".py", ".json")):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            digest.update(rel.encode("utf-8") + b"\0")
            with open(path, "rb") as handle:
                digest.update(handle.read())
            digest.update(b"\0")
    return digest.hexdigest()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (IOError, OSError):
        pass
    return platform.processor() or None


def usable_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count()


def host_environment():
    return {
        "python_version": platform.python_version(),
        "python_executable": sys.executable,
        "harness_version": HARNESS_VERSION,
        "harness_digest": harness_digest(),
        "harness_path": HARNESS_ROOT,
        "host": socket.gethostname(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": usable_cpus(),
    }
