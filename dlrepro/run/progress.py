"""Showing a run as it goes: a live display on a terminal, one line per
job elsewhere (CI logs, pipes)."""
import contextlib
import sys
import time

from dlrepro.run.pipeline import Events


def _eta(started, done, total):
    if not done:
        return "?"
    left = (time.monotonic() - started) / done * (total - done)
    minutes, seconds = divmod(int(left), 60)
    return f"{minutes}m{seconds:02d}s"


class LineEvents(Events):
    """One line per finished cell; for logs."""

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.started = time.monotonic()

    def log(self, message):
        print(message, file=self.stream, flush=True)

    def finish(self, index, total, item, entry):
        wall = f" {entry['wall_s']:.1f} s" if entry.get("wall_s") else ""
        note = f" ({entry['message']})" if entry.get("message") else ""
        print(f"[{index}/{total}] {item.id}: {entry['status']}{wall}{note}"
              f"  eta {_eta(self.started, index, total)}",
              file=self.stream, flush=True)


class LiveEvents(Events):
    """rich's live progress bar: cells done/total, current cell, ETA."""

    def __init__(self, console):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress,
                                   TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
            TimeRemainingColumn(), console=console, transient=False)
        self.task = None

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def log(self, message):
        self.progress.console.print(message, markup=False, highlight=False)

    def start(self, index, total, item):
        if self.task is None:
            self.task = self.progress.add_task(item.id, total=total,
                                               completed=index - 1)
        self.progress.update(self.task, description=item.id)

    def finish(self, index, total, item, entry):
        if self.task is None:
            self.task = self.progress.add_task(item.id, total=total)
        from rich.markup import escape
        style = {"ok": "green", "unsupported": "yellow"}.get(entry["status"],
                                                             "red")
        note = f" ({entry['message']})" if entry.get("message") else ""
        self.progress.console.print(
            f"[{style}]{entry['status']:>11}[/] {escape(item.id + note)}")
        self.progress.update(self.task, completed=index)


@contextlib.contextmanager
def events():
    """Live progress on a terminal, lines otherwise."""
    from rich.console import Console
    console = Console()
    if not console.is_terminal:
        yield LineEvents()
        return
    with LiveEvents(console) as live:
        yield live
