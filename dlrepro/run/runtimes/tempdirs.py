"""A temp dir of its own for each process the native runtime starts (its
TMPDIR), in this host's, removed once the process has ended. What a
framework leaves there otherwise stays in /tmp for good: torchrun's log
folder of every data-parallel run, TensorFlow's autograph sources
wherever a process ends without its atexit handlers (a fork server's
children, a killed cell), a convergence run's plan when it is killed. In
a container /tmp is the container's own and goes with it. Also why
torch.compile's kernel cache (under the temp dir) starts empty in each
cell natively, as it does in a container.

A SIGKILL of `invoke bench` leaves its processes' folders behind, since
nothing of it runs to remove them. Each folder's name says who made it
(the host process's pid, its pid namespace and its host name), so that
the next run of the same user removes those whose maker has ended, and
only those: a temp dir on a filesystem that several nodes or containers
share holds folders of processes this one cannot see."""
import os
import re
import shutil
import socket
import stat
import tempfile

PREFIX = "dlrepro-tmp-"
# mkdtemp's random tail: letters, digits and "_", never "-".
_TAIL = r"[a-z0-9_]+"


class TempDirs:
    def __init__(self):
        self.folders = {}
        self.swept = False

    def make(self, key):
        self.remove(key)
        if not self.swept:
            self.swept = True
            remove_orphans(tempfile.gettempdir())
        folder = self.folders[key] = tempfile.mkdtemp(
            prefix=PREFIX + maker(os.getpid()))
        return folder

    def remove(self, key):
        folder = self.folders.pop(key, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def maker(pid):
    """'PID-NAMESPACE-HOST-': the process `pid` of this pid namespace on
    this host, as a folder's name says it."""
    return "{}-{}".format(pid, _place())


def _place():
    """'NAMESPACE-HOST-': this pid namespace (0 where /proc cannot name
    it) on this host."""
    return "{}-{}-".format(_namespace(), socket.gethostname())


def remove_orphans(parent):
    """Remove the folders under `parent` that a host process of this user,
    this pid namespace and this host made and did not live to remove."""
    if not _namespace():
        return  # no pid is known to be of this namespace
    named = re.compile(re.escape(PREFIX) + r"(\d+)-"
                       + re.escape(_place()) + _TAIL + "$")
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        match = named.match(entry.name)
        if match is None or _runs(int(match.group(1))):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(entry.path, ignore_errors=True)


def _namespace():
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def _runs(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    return True
