"""The harness against a plain, idiomatic CNTK training loop.

For fcn5 (batch 64), alexnet-r (batch 128) and resnet-56 (batch 16) on the
CPU: the harness's mean iteration time (harness.timing.run_loop over the
CNTK backend's Session.step) against the loop of CNTK's own tutorials
(Trainer.train_minibatch fed numpy arrays, the loss read back from
previous_minibatch_loss_average) on the same model, built by the same
translation. The two are measured alternately, in rounds, in one process.
Goal: ratios within 5%.

CNTK 2.7 needs Python 3.6, so this runs in the CNTK image, the repository
mounted read-only (the image tag is what `invoke build --framework cntk`
printed):

    docker run --rm --network none --cpuset-cpus 0,1 \\
        -v "$PWD":/opt/dlrepro:ro -e PYTHONPATH=/opt/dlrepro \\
        dlrepro/cntk:cpu-<hash> /opt/venv/bin/python \\
        /opt/dlrepro/benchmarks/idiomatic_cntk.py --threads 2

This is a measurement to report, not a test: timings on a shared machine
are noisy, which is why per-round ratios are shown next to the overall one.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import sidebyside  # noqa: E402


def idiomatic_step(backend, network, batch_size, seed):
    """The step of CNTK's tutorials on the same model: numpy arrays (labels
    one-hot, sparse) handed to train_minibatch every iteration. The same loss
    and optimizer as the harness and no error metric, so that both sides do
    the same arithmetic."""
    import cntk as C
    import numpy as np
    model = backend.build_model(network, batch_size, "cpu", seed)
    features, labels = model.arguments[0], backend.input_variables(network)[1]
    loss = C.cross_entropy_with_softmax(model, labels)
    rate = C.learning_parameter_schedule(network.learning_rate,
                                         minibatch_size=batch_size)
    learner = C.momentum_sgd(model.parameters, rate,
                             C.momentum_schedule(network.momentum),
                             unit_gain=False) if network.momentum > 0 \
        else C.sgd(model.parameters, rate)
    trainer = C.Trainer(model, loss, [learner])
    from scipy import sparse  # CNTK's own dependency
    inputs, targets = backend.batch_arrays(network, batch_size, "cpu", seed + 1)
    # The backend declares its labels sparse, as CNTK's tutorials do.
    one_hot = sparse.csr_matrix(np.eye(network.classes,
                                       dtype=np.float32)[targets])
    feed = {features: np.ascontiguousarray(inputs), labels: one_hot}

    def step():
        trainer.train_minibatch(feed)
        return trainer.previous_minibatch_loss_average
    return step


def measure(backend, name, batch_size, rounds, iterations, warmup, seed):
    return sidebyside.measure(backend, idiomatic_step, name, batch_size,
                              rounds, iterations, warmup, seed)


NOTES = ("ratio: harness mean / idiomatic mean wall time per iteration (the "
         "harness's data is resident, the tutorial loop hands numpy arrays "
         "over each step)",)


def main(argv=None):
    return sidebyside.main(argv, __doc__.split("\n\n")[0], "cntk", measure,
                           ("CNTK", "the tutorials' train_minibatch loop"),
                           NOTES)


if __name__ == "__main__":
    sys.exit(main())
