"""Does the harness time JAX as a plain JAX training loop runs?

Times the harness's loop (harness.timing.run_loop over the JAX backend's
session: one jitted step with donated buffers, waiting for every output)
against the loop of JAX's and Optax's tutorials for the same model: a
`jax.jit`-decorated step of `jax.value_and_grad` and `optax.sgd` called in
a Python loop that waits for the loss alone ("plain"), and the same step
with the parameters, statistics and optimizer state donated ("donated", as
JAX's guides advise for training steps and as the harness does). All start
from the backend's translation of the same description (same weights, batch,
optimizer and loss). Blocks of iterations alternate in one process, the
order rotating every round, so drift and background load hit all alike;
`--block 1` alternates every iteration. Prints the ratio of mean (and of
median) iteration times per network; the goal is within 5% of the donated
loop (without donation the big networks pay a fresh allocation of every
parameter each step, which the harness does not).

    PYTHONPATH=. .venvs/jax-cpu/bin/python benchmarks/idiomatic_jax.py \\
        [--rounds 6] [--block 5] [--warmup 3] [--threads 2] [--json]
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import networks  # noqa: E402
from harness.timing import run_loop  # noqa: E402
import sidebyside  # noqa: E402

CASES = (("fcn5", 64), ("alexnet-r", 128), ("resnet-56", 16), ("lstm", 32))


class PlainLoop(object):
    """The tutorial loop: a jitted step, a Python for loop, the clock read
    once the loss is ready."""

    def __init__(self, backend, network, inputs, labels, donate=False):
        import jax  # the framework loads only in its own venv
        import optax
        model = backend.build_model(network, len(labels), "cpu", 0)
        optimizer = optax.sgd(network.learning_rate,
                              momentum=network.momentum or None)
        self.params, self.state = model.params, model.state
        self.opt_state = optimizer.init(self.params)
        self.inputs, self.labels = inputs, labels

        def loss_fn(params, state, x, y):
            logits, state = model.apply(params, state, x, True)
            logits = logits.reshape((-1, logits.shape[-1]))
            return optax.softmax_cross_entropy_with_integer_labels(
                logits, y.reshape(-1)).mean(), state

        def train_step(params, state, opt_state, x, y):
            (loss, state), grads = jax.value_and_grad(
                loss_fn, has_aux=True)(params, state, x, y)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), state, opt_state, loss

        self.train_step = jax.jit(train_step,
                                  donate_argnums=(0, 1, 2) if donate else ())

    def run(self, steps):
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            self.params, self.state, self.opt_state, loss = self.train_step(
                self.params, self.state, self.opt_state, self.inputs,
                self.labels)
            loss.block_until_ready()
            times.append(time.perf_counter() - started)
        return times


def measure(backend, name, batch, rounds, block, warmup):
    network = networks.get(name)
    session = backend.prepare(network, batch, "cpu", seed=0)
    loops = {"plain": PlainLoop(backend, network, session.inputs,
                                session.labels),
             "donated": PlainLoop(backend, network, session.inputs,
                                  session.labels, donate=True)}
    run_loop(session.step, iterations=0, warmup=warmup)
    for loop in loops.values():
        loop.run(warmup)
    order = ["harness", "plain", "donated"]
    times = dict((side, []) for side in order)
    ratios = dict((side, []) for side in loops)
    for index in range(rounds):
        # The order rotates, so that whichever runs after another (caches
        # warm from the other model, background load shifting) changes.
        block_times = {}
        for side in order[index % 3:] + order[:index % 3]:
            if side == "harness":
                block_times[side] = run_loop(session.step, iterations=block,
                                             warmup=0).times
            else:
                block_times[side] = loops[side].run(block)
            times[side] += block_times[side]
        for side in loops:
            ratios[side].append(statistics.mean(block_times["harness"])
                                / statistics.mean(block_times[side]))
    case = sidebyside.with_medians(
        sidebyside.block_case(name, batch, rounds, block, "plain",
                              times["harness"], times["plain"],
                              ratios["plain"]),
        "plain", times["harness"], times["plain"])
    case.update({
        "donated_mean_s": statistics.mean(times["donated"]),
        "donated_median_s": statistics.median(times["donated"]),
        "donated_ratio_of_means": (statistics.mean(times["harness"])
                                   / statistics.mean(times["donated"])),
        "donated_ratio_of_medians": (statistics.median(times["harness"])
                                     / statistics.median(times["donated"])),
        "donated_round_ratios": ratios["donated"],
    })
    return case


COLUMNS = (("harness s/iter", "harness_mean_s", 4),
           ("plain s/iter", "plain_mean_s", 4),
           ("donated s/iter", "donated_mean_s", 4),
           ("/plain means", "ratio_of_means", 3),
           ("/plain medians", "ratio_of_medians", 3),
           ("/donated means", "donated_ratio_of_means", 3),
           ("/donated medians", "donated_ratio_of_medians", 3))


def main():
    args, backend, rows = sidebyside.block_run(
        __doc__.splitlines()[0], "jax", measure, CASES)
    versions = backend.versions("cpu")
    sidebyside.show_rows(
        args.json, {"versions": versions, "threads": args.threads,
                    "effective_threads": backend.effective_threads(),
                    "rows": rows},
        "jax {}, jaxlib {}, optax {}, {} threads ({} CPUs)".format(
            versions["framework_version"], versions["jaxlib_version"],
            versions["optax_version"], args.threads,
            backend.effective_threads()), COLUMNS)


if __name__ == "__main__":
    main()
