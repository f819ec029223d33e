"""GPU stand-ins (a test's module text: a framework's real backend with
`gpu` cells computed on the CPU; there is no GPU here and NVML is faked),
written as the module `gpu_standin` beside the fake pynvml, and the
interpreter command line (`python -c DRIVER run ...`) that runs the
harness with it."""

import json
import subprocess

from paths import ROOT

DRIVER = ("import sys, importlib\n"
          "from harness import frameworks\n"
          "frameworks.load = lambda name, part='backend': "
          "importlib.import_module('gpu_standin')\n"
          "from harness.__main__ import main\n"
          "sys.exit(main(sys.argv[1:]))\n")


def write(shim, source):
    """`source` as the module gpu_standin in the folder `shim`."""
    (shim / "gpu_standin.py").write_text(source)


def run(python, cell, folder, env):
    """The harness run by `python` with the stand-in on `cell` (a GPU cell)
    in `folder`, to its end: its result, ok."""
    spec, out = folder / "cell.spec.json", folder / "cell.json"
    spec.write_text(json.dumps({"cell": cell, "container": None,
                                "clock_state": "cell.clock-state.json"}))
    proc = subprocess.run([python, "-c", DRIVER, "run", "--spec", str(spec),
                           "--out", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["status"] == "ok", result["error"]
    return result

