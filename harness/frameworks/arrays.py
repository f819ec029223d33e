"""A dataset split as arrays, prepared the same way for every framework:
pixels / 255, then per channel (x - mean) / std with the training split's
mean and (unbiased) std; PTB as windows of word ids and the same windows
shifted by one word.

`prepare` holds the preparation once; an array library's few operations
come in an `ops` object: numpy's here (TensorFlow, MXNet and CNTK feed
numpy), torch's in the PyTorch parallel module.
"""


def _np():
    # numpy comes with every framework that uses this module; importing it
    # here keeps harness.frameworks importable without it (PyTorch's lock has
    # no numpy).
    import numpy
    return numpy


class NumpyOps(object):
    """prepare()'s operations in numpy: float32 images, int64 labels."""

    def __init__(self):
        self.np = _np()

    def tokens(self, tokens):
        return self.np.asarray(tokens, dtype=self.np.int64)

    def pixels(self, images):
        """uint8 bytes -> float32 values in [0, 1], flat."""
        np = self.np
        return np.frombuffer(images, dtype=np.uint8).astype(
            np.float32) / np.float32(255.0)

    def channel_stats(self, pixels):
        """(mean, std) per channel of (count, channels, values) pixels."""
        np = self.np
        mean = pixels.mean(axis=(0, 2))
        std = np.maximum(pixels.std(axis=(0, 2), ddof=1), 1e-6)
        return mean.astype(np.float32), std.astype(np.float32)

    def images(self, images):
        return images.astype(self.np.float32)

    def labels(self, labels):
        np = self.np
        return np.frombuffer(labels, dtype=np.uint8).astype(np.int64)


def prepare(split, dataset, network, ops, stats=None):
    """((inputs, labels), stats): inputs shaped (count,) + the network's
    channels-first input shape (word ids for PTB), labels as `ops` makes
    them. `stats` (mean, std per channel) is computed when None."""
    if dataset.kind == "tokens":
        steps = network.input_shape[0]
        tokens = ops.tokens(split.tokens)
        n = split.count
        return (tokens[:n * steps].reshape(n, steps),
                tokens[1:n * steps + 1].reshape(n, steps)), None
    channels = dataset.sample_shape[0]
    pixels = ops.pixels(split.images).reshape(split.count, channels, -1)
    if stats is None:
        stats = ops.channel_stats(pixels)
    images = (pixels - stats[0][None, :, None]) / stats[1][None, :, None]
    images = images.reshape((split.count,) + tuple(network.input_shape))
    return (ops.images(images), ops.labels(split.labels)), stats


def arrays(split, dataset, network, stats=None):
    """prepare() in numpy: float32 inputs (int64 word ids for PTB), int64
    labels."""
    return prepare(split, dataset, network, NumpyOps(), stats)


def train_test(data, network, ops=None):
    """((train inputs, labels), (test inputs, labels)) of a
    harness.data.datasets.Loaded, both standardised with the training split's
    statistics."""
    ops = NumpyOps() if ops is None else ops
    train, stats = prepare(data.train, data.dataset, network, ops)
    test, _ = prepare(data.test, data.dataset, network, ops, stats)
    return train, test
