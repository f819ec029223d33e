"""Does the harness time TensorFlow as TensorFlow's own training loop runs?

Times the harness's loop (harness.timing.run_loop over the TensorFlow
backend's session: a compiled tf.function step) against TensorFlow's idiomatic
loop for the same model: Keras `Model.fit` with `steps_per_epoch` over a
repeated in-memory tf.data dataset of the same batch, each step timed by a
callback that reads the step's loss (as the harness reads it). Both models are
built by the backend from the same description, with the same optimizer (SGD,
the network's learning rate and momentum), loss (mean softmax cross-entropy)
and layout (NHWC on the CPU); XLA is off in both (`jit_compile=False`, since
Keras would otherwise choose). Blocks of iterations alternate in one process
(harness, fit, fit, harness, ...), so drift and background load hit both
alike; `--block 1` alternates every iteration. Prints the ratio of mean
(and of median) iteration times per network; the goal is within 5%.

    PYTHONPATH=. .venvs/tensorflow-cpu/bin/python \\
        benchmarks/idiomatic_tensorflow.py \\
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

CASES = (("fcn5", 64), ("alexnet-r", 128), ("resnet-56", 16))


def _step_timer():
    """A Keras callback recording the end of each training step. Reading the
    loss makes the step finish before the clock is read."""
    import tensorflow as tf  # the framework loads only in its own venv

    class StepTimer(tf.keras.callbacks.Callback):
        def __init__(self):
            super(StepTimer, self).__init__()
            self.times = []
            self._previous = None

        def on_train_batch_begin(self, batch, logs=None):
            if self._previous is None:
                self._previous = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            float(logs["loss"])
            now = time.perf_counter()
            self.times.append(now - self._previous)
            self._previous = now

    return StepTimer()


class KerasFit(object):
    """The idiomatic loop: compile once, then fit `steps` steps per call."""

    def __init__(self, backend, network, inputs, labels):
        import tensorflow as tf
        self.model = backend.build_model(network, len(labels), "cpu", 0)
        self.model.compile(
            optimizer=backend.make_optimizer(network),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(
                from_logits=True),
            jit_compile=False)
        self.dataset = tf.data.Dataset.from_tensors((inputs, labels)).repeat()

    def run(self, steps):
        timer = _step_timer()
        self.model.fit(self.dataset, epochs=1, steps_per_epoch=steps,
                       callbacks=[timer], shuffle=False, verbose=0)
        return timer.times


def measure(backend, name, batch, rounds, block, warmup):
    network = networks.get(name)
    session = backend.prepare(network, batch, "cpu", seed=0)
    fit = KerasFit(backend, network, session.inputs, session.labels)
    run_loop(session.step, iterations=0, warmup=warmup)
    fit.run(warmup)
    harness_times, fit_times, ratios = [], [], []
    for index in range(rounds):
        # ABBA order: whichever runs second in a round (caches warm from
        # the other model, background load shifting) alternates.
        if index % 2 == 0:
            series = run_loop(session.step, iterations=block, warmup=0)
            times = fit.run(block)
        else:
            times = fit.run(block)
            series = run_loop(session.step, iterations=block, warmup=0)
        harness_times += series.times
        fit_times += times
        ratios.append(statistics.mean(series.times) / statistics.mean(times))
    return sidebyside.with_medians(
        sidebyside.block_case(name, batch, rounds, block, "fit",
                              harness_times, fit_times, ratios),
        "fit", harness_times, fit_times)


COLUMNS = (("harness s/iter", "harness_mean_s", 4),
           ("fit s/iter", "fit_mean_s", 4),
           ("ratio of means", "ratio_of_means", 3),
           ("ratio of medians", "ratio_of_medians", 3))


def main():
    args, backend, rows = sidebyside.block_run(
        __doc__.splitlines()[0], "tensorflow", measure, CASES)
    # XLA off: prepare's default compile mode is "function", as fit's.
    versions = dict(backend.versions("cpu"), tf_xla=False)
    sidebyside.show_rows(
        args.json, {"versions": versions, "threads": args.threads,
                    "rows": rows},
        "tensorflow {}, keras {}, {} threads, XLA {}".format(
            versions["framework_version"], versions["keras_version"],
            args.threads, "on" if versions["tf_xla"] else "off"), COLUMNS)


if __name__ == "__main__":
    main()
