"""Progress of long image work (push, pull, build) from the Docker engine's
JSON stream: on a terminal, rich's bars (the project's progress library,
as for bench): one per layer with bytes done of the total, elapsed time and
an estimate, or the build's step of its steps; in a log or CI, one line per
layer finished or per step begun, never a line per chunk."""
import contextlib
import re
import sys
import time

# The engine's per-layer states that end a layer's transfer.
LAYER_DONE = ("Pushed", "Layer already exists", "Pull complete",
              "Already exists", "Mounted from", "Saved")
BUILD_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$", re.MULTILINE)
# pip download's lines (without its bar): a file's size, then where it went.
PIP_SIZE = re.compile(r"^\s*Downloading (\S+) \(([\d.]+) (kB|MB|GB)\)")
PIP_SAVED = re.compile(r"^(?:Saved|\s*File was already downloaded) (\S+)")
UNITS = {"kB": 1e3, "MB": 1e6, "GB": 1e9}
# A live display shows only where the command is the user's own (invoke
# build, wheelhouse, push, pull): under bench's own live display a second
# one would overwrite it, so there the lines go above bench's.
LIVE = {"allowed": False}


def _size(count):
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else \
                f"{count:.1f} {unit}"
        count /= 1000


class LineProgress:
    """One line per layer finished (or build step begun), for logs."""

    def __init__(self, what, unit="layer", count=None, stream=None):
        self.what = what
        self.unit = unit
        self.count = count
        # Where stdout is when the work starts (a test's capture, bench's
        # live display), not when this module was imported.
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        self.totals = {}
        self.done = set()

    def layer(self, layer, status, current=None, total=None):
        if total:
            self.totals[layer] = total
        if status.startswith(LAYER_DONE) and layer not in self.done:
            self.done.add(layer)
            size = self.totals.get(layer)
            print(f"{self.what}: {self.unit} {layer} {status.lower()}"
                  + (f" ({_size(size)})" if size else "")
                  + f", {len(self.done)}"
                  + (f" of {self.count}" if self.count else "")
                  + f" {self.unit}s done, "
                    f"{time.monotonic() - self.started:.0f} s",
                  file=self.stream, flush=True)

    def step(self, number, total, text):
        print(f"{self.what}: step {number}/{total}: {text[:100]}",
              file=self.stream, flush=True)

    def note(self, message):
        print(message, file=self.stream, flush=True)


class LiveProgress:
    """rich's bars: a layer's bytes (done of total, speed, elapsed, time
    left) or the build's steps."""

    def __init__(self, what, console, unit="layer"):
        from rich.progress import (BarColumn, DownloadColumn, Progress,
                                   TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn, TransferSpeedColumn)
        self.what = what
        self.unit = unit
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            console=console, transient=False)
        self.tasks = {}
        self.steps = None

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def layer(self, layer, status, current=None, total=None):
        task = self.tasks.get(layer)
        if task is None:
            task = self.tasks[layer] = self.progress.add_task(
                f"{self.what} {self.unit} {layer[:40]}", total=total or None)
        if total:
            self.progress.update(task, total=total)
        if current is not None:
            self.progress.update(task, completed=current)
        if status.startswith(LAYER_DONE):
            total = self.progress.tasks[task].total or 0
            self.progress.update(task, total=total, completed=total,
                                 description=f"{self.what} {self.unit} "
                                             f"{layer[:40]} {status.lower()}")

    def step(self, number, total, text):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress,
                                   TextColumn, TimeElapsedColumn)
        if self.steps is None:
            # Steps are counted, not bytes: a bar of its own kind.
            self.progress.stop()
            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(),
                console=self.progress.console, transient=False)
            self.progress.start()
            self.steps = self.progress.add_task(self.what, total=total)
        self.progress.update(self.steps, completed=number - 1,
                             description=f"{self.what}: {text[:60]}")

    def note(self, message):
        self.progress.console.print(message, markup=False, highlight=False)


def allow_live():
    """Let this process show live bars (the image tasks call it)."""
    LIVE["allowed"] = True


@contextlib.contextmanager
def progress(what, unit="layer", count=None):
    """Live bars on a terminal where allowed, lines otherwise; `count`: how
    many layers or files there are, where known."""
    from rich.console import Console
    console = Console()
    if not (LIVE["allowed"] and console.is_terminal):
        yield LineProgress(what, unit, count)
        return
    with LiveProgress(what, console, unit) as live:
        yield live


def pip_line(line, shown):
    """Feed one line of pip download's output to `shown`."""
    sized = PIP_SIZE.match(line)
    if sized:
        name = sized[1].rsplit("/", 1)[-1]
        shown.layer(name, "Downloading", 0,
                    int(float(sized[2]) * UNITS[sized[3]]))
        return
    saved = PIP_SAVED.match(line)
    if saved:
        name = saved[1].rsplit("/", 1)[-1]
        shown.layer(name, "Saved")


def follow(chunk, shown):
    """Feed one chunk of the engine's JSON stream to `shown`; returns the
    chunk's error text, if any."""
    if "error" in chunk:
        return str(chunk["error"]).strip()
    if "stream" in chunk:
        for number, total, text in BUILD_STEP.findall(chunk["stream"]):
            shown.step(int(number), int(total), text.strip())
    elif chunk.get("id") and chunk.get("status"):
        detail = chunk.get("progressDetail") or {}
        shown.layer(chunk["id"], chunk["status"], detail.get("current"),
                    detail.get("total"))
    return None
