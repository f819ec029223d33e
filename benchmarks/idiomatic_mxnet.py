"""The harness against a plain, idiomatic Gluon training loop.

For fcn5 (batch 64), alexnet-r (batch 128) and resnet-56 (batch 16) on the
CPU: the harness's mean iteration time (harness.timing.run_loop over the
MXNet backend's Session.step) against the loop an MXNet user writes
(autograd.record, backward, trainer.step, loss.asscalar()) on the same
model, built by the same translation and hybridized the same way. The two
are measured alternately, in rounds, in one process, so that drifting load
on the machine hits both alike. Goal: ratios within 5%.

Run it in the MXNet environment from the repository root:

    PYTHONPATH=. .venvs/mxnet-cpu/bin/python benchmarks/idiomatic_mxnet.py
    ... --json            (the same figures as JSON)

This is a measurement to report, not a test: timings on a shared machine
are noisy, which is why per-round ratios are shown next to the overall one.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sidebyside  # noqa: E402


def idiomatic_step(backend, network, batch_size, seed):
    """The training step an MXNet user writes, on the same model: the loss
    read back with asscalar() ends the iteration."""
    import mxnet as mx
    from mxnet import autograd, gluon
    model = backend.hybridize(backend.build_model(network, batch_size, "cpu",
                                                  seed))
    loss_fn = backend.hybridize(gluon.loss.SoftmaxCrossEntropyLoss())
    trainer = gluon.Trainer(model.collect_params(), "sgd",
                            {"learning_rate": network.learning_rate,
                             "momentum": network.momentum}, kvstore=None)
    shape = (batch_size,) + tuple(network.input_shape)
    x = mx.nd.random.normal(0, 1, shape=shape)
    y = mx.nd.random.randint(0, network.classes, shape=(batch_size,)).astype(
        "float32")

    def step():
        with autograd.record():
            loss = loss_fn(model(x), y)
        loss.backward()
        trainer.step(batch_size)
        return loss.mean().asscalar()
    return step


def measure(backend, name, batch_size, rounds, iterations, warmup, seed):
    """Alternating rounds of the harness and the idiomatic loop; raw
    seconds per iteration of each, the per-round ratios of the means, and
    process CPU seconds per iteration (all threads), which a busy machine
    disturbs less than wall time when MXNet runs one thread.

    The idiomatic loop stops waiting when its loss is ready, while backward
    and update still run. So each side starts from an idle engine (waitall)
    and one untimed iteration: the timed ones then hold exactly `iterations`
    iterations of work (the first pays for the primer's tail, the last leaves
    its own), and no side's leftover work lands in the other's times.
    """
    import mxnet as mx
    return sidebyside.measure(backend, idiomatic_step, name, batch_size,
                              rounds, iterations, warmup, seed,
                              settle=mx.nd.waitall)


NOTES = ("ratio: harness mean / idiomatic mean wall time per iteration; "
         "round ratios: its spread over the rounds;",
         "CPU ratio: the same for process CPU seconds per iteration (all "
         "threads); steadier than wall time on a busy machine",
         "with one thread (with more, OpenMP threads spinning at barriers for "
         "a descheduled teammate inflate it too).")


def main(argv=None):
    return sidebyside.main(argv, __doc__.split("\n\n")[0], "mxnet", measure,
                           ("MXNet", "idiomatic Gluon loop"), NOTES)


if __name__ == "__main__":
    sys.exit(main())
