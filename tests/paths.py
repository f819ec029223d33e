"""Where things are, named once for every test module."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
INVOKE = str(Path(sys.executable).parent / "invoke")
# An interpreter whose harness is tests/fake_harness.py (DLREPRO_FAKE_MODES).
SCRIPTED = str(TESTS / "bin" / "scripted-python")
