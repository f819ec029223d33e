"""The progress display's time left comes from the jobs that really ran."""
import io
from types import SimpleNamespace

from dlrepro.run.progress import Eta, LineEvents


def job(name):
    return SimpleNamespace(id=name)


def test_unsupported_and_kept_jobs_do_not_shorten_the_estimate():
    """Ten unsupported cells took no time: a 60 s cell with ten more to go
    leaves ten minutes, not a minute."""
    eta = Eta()
    for i in range(10):
        eta.start(job(f"u{i}"))
        eta.finish(job(f"u{i}"), {"status": "unsupported", "wall_s": 0.01})
    eta.finish(job("kept"), {"status": "ok", "wall_s": 500.0})  # resumed
    assert eta.text(10) == "?"
    eta.start(job("ran"))
    eta.finish(job("ran"), {"status": "ok", "wall_s": 60.0})
    assert eta.text(10) == "10m00s"
    assert eta.text(0) == "0m00s"


def test_line_events_print_one_line_per_job():
    out = io.StringIO()
    events = LineEvents(out)
    events.start(1, 2, job("a"))
    events.finish(1, 2, job("a"), {"status": "ok", "wall_s": 3.0,
                                   "message": None})
    assert out.getvalue() == "[1/2] a: ok 3.0 s  eta 0m03s\n"
