"""Showing a run as it goes: a live display on a terminal, one line per
job elsewhere (CI logs, pipes)."""
import contextlib
import sys

from dlrepro.run.events import Events


class Eta:
    """Time left, from the jobs that really ran: a job that was unsupported
    (never started) or kept from a resumed run took no time and says
    nothing about the others."""

    def __init__(self):
        self.started = set()
        self.seconds = 0.0
        self.ran = 0

    def start(self, job):
        self.started.add(job.id)

    def finish(self, job, entry):
        if job.id in self.started and entry["status"] != "unsupported" \
                and entry.get("wall_s"):
            self.seconds += entry["wall_s"]
            self.ran += 1

    def text(self, left):
        if left <= 0:
            return "0m00s"
        if not self.ran:
            return "?"
        minutes, seconds = divmod(int(self.seconds / self.ran * left), 60)
        return f"{minutes}m{seconds:02d}s"


class LineEvents(Events):
    """One line per finished job; for logs."""

    def __init__(self, stream=sys.stdout):
        self.stream = stream
        self.eta = Eta()

    def log(self, message):
        print(message, file=self.stream, flush=True)

    def start(self, index, total, job):
        self.eta.start(job)

    def finish(self, index, total, job, entry):
        self.eta.finish(job, entry)
        wall = f" {entry['wall_s']:.1f} s" if entry.get("wall_s") else ""
        note = f" ({entry['message']})" if entry.get("message") else ""
        print(f"[{index}/{total}] {job.id}: {entry['status']}{wall}{note}"
              f"  eta {self.eta.text(total - index)}",
              file=self.stream, flush=True)


class LiveEvents(Events):
    """rich's live progress bar: jobs done/total, current job, ETA."""

    def __init__(self, console):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress,
                                   TextColumn, TimeElapsedColumn)
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta {task.fields[eta]}"), console=console,
            transient=False)
        self.task = None
        self.eta = Eta()

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def log(self, message):
        self.progress.console.print(message, markup=False, highlight=False)

    def _task(self, job, total, completed):
        if self.task is None:
            self.task = self.progress.add_task(job.id, total=total,
                                               completed=completed, eta="?")

    def start(self, index, total, job):
        self.eta.start(job)
        self._task(job, total, index - 1)
        self.progress.update(self.task, description=job.id)

    def finish(self, index, total, job, entry):
        self.eta.finish(job, entry)
        self._task(job, total, index)
        from rich.markup import escape
        style = {"ok": "green", "unsupported": "yellow"}.get(entry["status"],
                                                             "red")
        note = f" ({entry['message']})" if entry.get("message") else ""
        self.progress.console.print(
            f"[{style}]{entry['status']:>11}[/] {escape(job.id + note)}")
        self.progress.update(self.task, completed=index,
                             eta=self.eta.text(total - index))


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
