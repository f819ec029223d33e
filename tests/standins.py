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


SOURCE = '''"""{doc}"""
from harness.frameworks.{framework} import backend as _real

NAME = _real.NAME
DEVICES = ("cpu", "gpu")
{declared}effective_threads = _real.effective_threads
is_out_of_memory = _real.is_out_of_memory
math_mode = _real.math_mode


def versions(device):
    return _real.versions("cpu")


def configure(threads, device, seed):
    _real.configure(threads, "cpu", seed)


def prepare(network, batch_size, device, seed, batch=None, **options):
    return _real.prepare(network, batch_size, "cpu", seed, batch, **options)
'''


def source(framework, doc, declared="", more=""):
    """A stand-in's text: `framework`'s real backend with `gpu` cells
    computed on the CPU; `declared`, lines that declare what this stand-in
    offers (its precisions, ...); `more`, text after (a prepare of its own
    may wrap the one above, as `_cpu_prepare = prepare`)."""
    return SOURCE.format(doc=doc, framework=framework,
                         declared=declared) + more


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

