"""numpy arrays of a dataset split, for the frameworks that feed numpy
(TensorFlow, MXNet); the same preparation as the PyTorch module's tensors:
pixels / 255, then per channel (x - mean) / std with the training split's
mean and (unbiased) std; PTB as windows of word ids and the same windows
shifted by one word."""


def _np():
    # numpy comes with every framework that uses this module; importing it
    # here keeps harness.frameworks importable without it (PyTorch's lock has
    # no numpy).
    import numpy
    return numpy


def arrays(split, dataset, network, stats=None):
    """((inputs, labels), stats): inputs shaped (count,) + the network's
    channels-first input shape, float32 (int64 word ids for PTB); labels
    int64. `stats` (mean, std per channel) is computed when None."""
    np = _np()
    if dataset.kind == "tokens":
        steps = network.input_shape[0]
        tokens = np.asarray(split.tokens, dtype=np.int64)
        n = split.count
        return (tokens[:n * steps].reshape(n, steps),
                tokens[1:n * steps + 1].reshape(n, steps)), None
    channels = dataset.sample_shape[0]
    pixels = np.frombuffer(split.images, dtype=np.uint8).reshape(
        split.count, channels, -1).astype(np.float32) / np.float32(255.0)
    if stats is None:
        mean = pixels.mean(axis=(0, 2))
        std = np.maximum(pixels.std(axis=(0, 2), ddof=1), 1e-6)
        stats = (mean.astype(np.float32), std.astype(np.float32))
    images = (pixels - stats[0][None, :, None]) / stats[1][None, :, None]
    labels = np.frombuffer(split.labels, dtype=np.uint8).astype(np.int64)
    return (images.reshape((split.count,) + tuple(network.input_shape))
            .astype(np.float32), labels), stats
