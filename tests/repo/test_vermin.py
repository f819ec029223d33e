"""The harness runs in CNTK's image (Python 3.6): vermin must agree."""
import subprocess
import sys
from pathlib import Path

VERMIN = str(Path(sys.executable).parent / "vermin")
ARGS = ["-t=3.6-", "--violations", "--no-tips", "--eval-annotations"]


def test_harness_is_python36_compatible(root):
    proc = subprocess.run([VERMIN, *ARGS, "harness"], cwd=root,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_check_catches_newer_syntax(tmp_path):
    # proves the flags above really reject code Python 3.6 cannot run
    (tmp_path / "new.py").write_text("if (n := 3) > 2:\n    print(n)\n")
    proc = subprocess.run([VERMIN, *ARGS, str(tmp_path)], capture_output=True,
                          text=True)
    assert proc.returncode != 0
