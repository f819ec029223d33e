"""A launcher's workers end with the harness that started the launcher,
however the chain breaks (harness.frameworks.children): torchrun SIGTERMed
while it starts its workers ends without stopping the ones it started, and
a worker cannot ask to die with a launcher that has already gone. Real
processes, standard library only: a launcher that ends at once or is
killed, a worker that asks (stay_with_launcher) when the test says."""
import os
import signal
import subprocess
import sys
import textwrap

import processes
import waits

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

WORKER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {root!r})
    from harness.frameworks import children
    go, stayed = sys.argv[1], sys.argv[2]
    while not os.path.exists(go):
        time.sleep(0.01)
    children.stay_with_launcher()
    open(stayed, "w").close()
    time.sleep(600)
""")

# LAUNCHER MODE PID_FILE WORKER...: starts the worker, writes its pid, then
# ends ("end") or waits to be killed ("wait").
LAUNCHER = textwrap.dedent("""
    import os, subprocess, sys, time
    mode, pid_file, command = sys.argv[1], sys.argv[2], sys.argv[3:]
    worker = subprocess.Popen(command, stderr=open(pid_file + ".log", "w"))
    with open(pid_file + ".tmp", "w") as handle:
        handle.write(str(worker.pid))
    os.rename(pid_file + ".tmp", pid_file)
    if mode == "wait":
        time.sleep(600)
""")


def _ended(pid):
    """Gone, or a zombie nobody has reaped yet: either way not running."""
    return not processes._status(pid).get("State", "Z").startswith(
        ("R", "S", "D", "T", "t"))


def _launch(tmp_path, mode, harness_pid):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER.format(root=ROOT))
    go, stayed, pid_file = (tmp_path / "go", tmp_path / "stayed",
                            tmp_path / "worker.pid")
    env = dict(os.environ, DLREPRO_HARNESS_PID=str(harness_pid))
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, mode, str(pid_file),
         sys.executable, str(worker), str(go), str(stayed)], env=env)
    pid = int(waits.wait_for(lambda: waits.text_of(pid_file),
                             what="the worker's pid"))
    return launcher, pid, go, stayed


def test_a_worker_whose_launcher_already_ended_ends(tmp_path):
    launcher, pid, go, stayed = _launch(tmp_path, "end", os.getpid())
    try:
        launcher.wait(120)
        go.touch()
        waits.wait_for(lambda: _ended(pid), what="the orphaned worker's end")
        assert not stayed.exists()
        assert "has ended; so does the worker" in waits.text_of(
            tmp_path / "worker.pid.log")
    finally:
        processes.signal_each([pid], signal.SIGKILL)


def test_a_worker_whose_launcher_is_killed_later_ends(tmp_path):
    launcher, pid, go, stayed = _launch(tmp_path, "wait", os.getpid())
    try:
        go.touch()
        waits.wait_for(stayed.exists, what="the worker's request")
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        waits.wait_for(lambda: _ended(pid), what="the worker's end")
    finally:
        processes.signal_each([pid], signal.SIGKILL)


def test_a_worker_of_a_live_harness_stays(tmp_path):
    """The check must not end a worker whose chain is whole: the test is its
    harness, and the launcher lives."""
    launcher, pid, go, stayed = _launch(tmp_path, "wait", os.getpid())
    try:
        go.touch()
        waits.wait_for(stayed.exists, what="the worker's request")
        assert not _ended(pid)
    finally:
        processes.signal_each([pid, launcher.pid], signal.SIGKILL)
        launcher.wait()


def test_a_launcher_dies_with_its_killed_harness(tmp_path):
    pid_file = tmp_path / "launcher.pid"
    harness = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, subprocess, sys, time
        sys.path.insert(0, {ROOT!r})
        from harness.frameworks import children
        child = subprocess.Popen([sys.executable, "-c",
                                  "import time; time.sleep(600)"],
                                 preexec_fn=children.die_with_this_process())
        open({str(pid_file)!r} + ".tmp", "w").write(str(child.pid))
        os.rename({str(pid_file)!r} + ".tmp", {str(pid_file)!r})
        time.sleep(600)
    """)])
    pid = int(waits.wait_for(lambda: waits.text_of(pid_file),
                             what="the launcher's pid"))
    try:
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        waits.wait_for(lambda: _ended(pid), what="the launcher's end")
    finally:
        processes.signal_each([pid], signal.SIGKILL)
