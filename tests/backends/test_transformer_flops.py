"""The transformer's analytic FLOPs (harness.networks.transformer_macs:
2 per multiply-accumulate, attention's score and value products over every
key, training = 3 x forward) checked against what the frameworks count of
their own training step, every difference explained:

- PyTorch's flop counter (torch.utils.flop_counter.FlopCounterMode) over
  one step: with attention decomposed into matrix products (the MATH
  backend of scaled_dot_product_attention) it counts exactly the analytic
  FLOPs. With the default CPU kernel it counts exactly the attention
  products fewer: the counter has no formula for
  _scaled_dot_product_flash_attention_for_cpu (it has them for the CUDA
  flash and memory-efficient kernels). It counts no element-wise work,
  as the convention does not.
- JAX: the training step's jaxpr has dot_general products of exactly the
  analytic FLOPs (the embedding's gradient is a scatter-add, no product;
  jax.nn.dot_product_attention's XLA path is two einsums over every key).
  XLA's cost analysis of the compiled step counts more: one FLOP per
  element of every element-wise op (layer norms, gelu, softmax, the mask,
  the SGD update), which the convention leaves out; the excess stays a
  few per cent.

Each runs in its framework's native environment (skipped with the reason
where that cannot be made here).
"""
import json
import subprocess

import pytest

from harness import networks as nets
from paths import ROOT
from variants import framework_env, framework_python

CASES = (("gpt-tiny", 4), ("gpt-small@32", 1))

TORCH_PROBE = """
import json
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode
from harness import frameworks, networks as nets, threads
threads.apply(2)
backend = frameworks.load("pytorch")
backend.configure(2, "cpu", 0)
out = {}
for name, batch in %r:
    session = backend.prepare(nets.get(name), batch, "cpu", 0)
    counted = {}
    for kernel in ("default", "math"):
        with FlopCounterMode(display=False) as counter:
            if kernel == "math":
                with sdpa_kernel(SDPBackend.MATH):
                    session.step()
            else:
                session.step()
        counted[kernel] = counter.get_total_flops()
    out[name] = counted
print(json.dumps(out))
""" % (CASES,)

JAX_PROBE = """
import json
import numpy as np
from harness import frameworks, networks as nets, threads
threads.apply(2)
backend = frameworks.load("jax")
backend.configure(2, "cpu", 0)


def dot_flops(jaxpr):
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contract, _), _batch = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += 2 * int(np.prod(eqn.outvars[0].aval.shape)) * int(
                np.prod([lhs[i] for i in contract]))
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                total += dot_flops(inner)
    return total


out = {}
for name, batch in %r:
    s = backend.prepare(nets.get(name), batch, "cpu", 0)
    cost = s._step.lower(s.params, s.state, s.opt_state, s.inputs,
                         s.labels).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    out[name] = {"jaxpr_dots": dot_flops(s.jaxpr().jaxpr),
                 "xla": float(cost["flops"])}
print(json.dumps(out))
""" % (CASES,)


def _run(framework, probe):
    python = framework_python(framework)
    proc = subprocess.run([str(python), "-s", "-c", probe], cwd=ROOT,
                          env=framework_env(), capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def attention_flops(name, batch):
    """Training FLOPs of attention's two products (3 x forward)."""
    net = nets.get(name)
    layer = net.layers[0]
    steps = net.input_shape[0]
    return 3 * 2 * 2 * steps * steps * layer.dim * layer.layers * batch


@pytest.fixture(scope="module")
def torch_counts():
    return _run("pytorch", TORCH_PROBE)


@pytest.fixture(scope="module")
def jax_counts():
    return _run("jax", JAX_PROBE)


@pytest.mark.parametrize("name, batch", CASES)
def test_pytorch_counts_the_analytic_flops(torch_counts, name, batch):
    analytic = nets.flops_per_iteration(nets.get(name), batch)
    assert torch_counts[name]["math"] == analytic
    # The CPU's fused attention kernel is not counted, and only it.
    assert torch_counts[name]["default"] == analytic - attention_flops(
        name, batch)


@pytest.mark.parametrize("name, batch", CASES)
def test_jax_matrix_products_are_the_analytic_flops(jax_counts, name, batch):
    analytic = nets.flops_per_iteration(nets.get(name), batch)
    assert jax_counts[name]["jaxpr_dots"] == analytic
    # XLA adds one FLOP per element of the element-wise work.
    excess = jax_counts[name]["xla"] / analytic - 1
    assert 0 < excess < 0.1, excess
