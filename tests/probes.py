"""Code run in a framework's own Python (a virtual environment, or the
CNTK image's interpreter), with the repository on PYTHONPATH; it prints
one JSON line last, which the tests read."""
import json
import os
import subprocess
import textwrap

TIMEOUT = 900


def run_probe(python, root, code, *args):
    env = dict(os.environ, PYTHONPATH=str(root))
    proc = subprocess.run([python, "-s", "-c", textwrap.dedent(code)]
                          + list(args), cwd=root, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def loss_probe(framework):
    """Six steps of fcn-r, alexnet-r and lstm on the harness's fixed batch
    (batch 16, seed 1): {network: [loss of each step]}."""
    return """
    import json
    from harness import threads, networks as nets, data
    threads.apply(2)
    from harness.frameworks.{} import backend
    backend.configure(2, "cpu", 0)
    out = {{}}
    for name in ("fcn-r", "alexnet-r", "lstm"):
        network = nets.get(name)
        session = backend.prepare(network, 16, "cpu", 0,
                                  batch=data.fixed_batch(network, 16, 1))
        out[name] = [session.step() for _ in range(6)]
    print(json.dumps(out))
    """.format(framework)
