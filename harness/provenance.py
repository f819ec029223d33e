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


# A virtio balloon device, and its feature bit VIRTIO_BALLOON_F_REPORTING
# (the virtio specification, 5.5.3): the guest reports free memory to its
# hypervisor, which drops it.
VIRTIO_DEVICES = "/sys/bus/virtio/devices"
VIRTIO_BALLOON = 5
BALLOON_F_REPORTING = 5
PAGE_REPORTING_ORDER = "/sys/module/page_reporting/parameters/page_reporting_order"
TRANSPARENT_HUGEPAGE = "/sys/kernel/mm/transparent_hugepage/enabled"


def _read(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (IOError, OSError):
        return None


def transparent_hugepage(path=TRANSPARENT_HUGEPAGE):
    """The kernel's transparent huge page mode (always, madvise or never:
    the word in brackets); None where it cannot be read."""
    text = _read(path)
    if text is None or "[" not in text:
        return None
    return text.split("[", 1)[1].split("]", 1)[0]


def free_page_reporting(devices=VIRTIO_DEVICES, order=PAGE_REPORTING_ORDER):
    """Whether this (virtual) machine reports freed memory to its
    hypervisor, which may then drop it: {"order": the smallest block
    reported, as 2**order pages} when a virtio balloon offers it, False
    when no balloon does, None where /sys cannot tell. Recorded because a
    page the hypervisor dropped costs a fault there too when touched again,
    which can make first touches (model build, warm-up) uneven."""
    try:
        names = os.listdir(devices)
    except (IOError, OSError):
        return False if os.path.isdir("/sys/bus") else None
    for name in sorted(names):
        device = _read(os.path.join(devices, name, "device"))
        features = _read(os.path.join(devices, name, "features")) or ""
        try:
            balloon = device is not None and int(device, 16) == VIRTIO_BALLOON
        except ValueError:
            balloon = False
        if balloon and features[BALLOON_F_REPORTING:BALLOON_F_REPORTING + 1] \
                == "1":
            text = _read(order)
            return {"order": int(text) if text and text.isdigit() else None}
    return False


def memory_environment():
    """What the kernel does with memory that can change how long first
    touches take (model build, warm-up), beside the allocator's
    settings."""
    return {"transparent_hugepage": transparent_hugepage(),
            "free_page_reporting": free_page_reporting()}


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
        "memory": memory_environment(),
    }
