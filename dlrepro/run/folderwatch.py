"""A run folder moved or deleted while its run holds it: noticed within a
second, the run stopped as a Ctrl-C stops it, a one-line error instead
of a traceback at the next write.

The run holds its folder by a descriptor (runfolder.locked), which follows
the folder wherever it is moved; its path does not. Every file the run
writes is named by that path, so once the folder is gone the run could
only fail, or write into whatever another process put at the old name.
A thread compares the two twice a second; when the path no longer names
the held folder it raises FolderGone in the main thread (by a signal, as
Ctrl-C raises KeyboardInterrupt there), so every wait that stops its
process on Ctrl-C stops it on this too, with no check of its own."""
import os
import signal
import threading

from dlrepro.run import runrecord

# How often the thread looks, in seconds.
POLL_S = 0.5
# The signal the thread raises FolderGone by; nothing else in the host
# process uses it, and a child started by exec gets its default back.
SIGNAL = signal.SIGUSR1


class FolderGone(Exception):
    """The run folder was moved or deleted while the run held it."""


class HeldFolder:
    """The run folder `run_dir` as its lock's descriptor `fd` holds it."""

    def __init__(self, run_dir, fd):
        self.run_dir = run_dir
        self.fd = fd
        held = os.fstat(fd)
        self.identity = (held.st_dev, held.st_ino)

    def gone(self):
        """Whether `run_dir` no longer names the held folder."""
        try:
            now = os.stat(self.run_dir)
        except OSError:
            return True
        return (now.st_dev, now.st_ino) != self.identity

    def where(self):
        """The held folder's path now; None once it is deleted."""
        if os.fstat(self.fd).st_nlink == 0:
            return None
        try:
            path = os.readlink(f"/proc/self/fd/{self.fd}")
        except OSError:
            return None
        return None if path.endswith(" (deleted)") else path

    def write_run(self, record):
        """run.json written into the held folder wherever it is now (by
        its descriptor, never by a path another folder may hold); False
        when it is deleted or cannot be written."""
        if self.where() is None:
            return False
        try:
            runrecord.write_run(f"/proc/self/fd/{self.fd}", record)
        except OSError:
            return False
        return True

    def message(self, what_became, written):
        """The one line that says what happened and what to do (`written`:
        whether run.json in the moved folder says so)."""
        where = self.where()
        if where is None:
            return (f"the run folder {self.run_dir} was deleted while the "
                    f"run ran: {what_became}")
        said = "; its run.json there says interrupted" if written else ""
        return (f"the run folder {self.run_dir} was moved to {where} while "
                f"the run ran: {what_became}{said}; move it back, then "
                f"rerun with --resume to finish it")


class Watch:
    """Raise FolderGone in this (the main) thread once `held` (a
    HeldFolder) is gone, from now until stop(). Outside the main thread,
    where no signal handler can be set, nothing is watched."""

    def __init__(self, held):
        self.held = held
        self.armed = threading.current_thread() is threading.main_thread()
        self.thread = None
        if not self.armed:
            return
        self.main = threading.get_ident()
        self.done = threading.Event()
        self.previous = signal.signal(SIGNAL, self._raise_gone)
        self.thread = threading.Thread(target=self._watch, daemon=True,
                                       name="run-folder-watch")
        self.thread.start()

    def _raise_gone(self, signum, frame):
        if self.armed:
            self.armed = False
            raise FolderGone(str(self.held.run_dir))

    def _watch(self):
        while not self.done.wait(POLL_S):
            if self.held.gone():
                signal.pthread_kill(self.main, SIGNAL)
                return

    def stop(self):
        if self.thread is None:
            return
        self.armed = False
        self.done.set()
        self.thread.join()
        # Joined: a signal it sent has reached this thread's handler,
        # which, disarmed, lets it pass.
        signal.signal(SIGNAL, self.previous)
        self.thread = None
