"""The harness runs in CNTK's image (Python 3.6): vermin must agree."""
import subprocess
import sys
from pathlib import Path


def test_harness_is_python36_compatible(root):
    vermin = Path(sys.executable).parent / "vermin"
    proc = subprocess.run([str(vermin), "-t=3.6-", "--violations", "--no-tips",
                           "--eval-annotations", "harness"],
                          cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
