"""Synthetic data shaped like a real dataset, that a network can learn:
for runs without the dataset's files (harness.data.datasets.synthetic labels
them `synthetic`) and for the generated files of the convergence tests.
"""
from .formats import Split, sample_size, token_split


def _noise(rng, count):
    return rng.getrandbits(8 * count).to_bytes(count, "little") \
        if count else b""


def _bernoulli_table(probability):
    # bytes.translate maps each random byte to 0xFF with the probability:
    # a per-pixel coin flip at C speed.
    cut = int(round(256 * probability))
    return bytes(0xFF if v < cut else 0 for v in range(256))


_ON = _bernoulli_table(0.2)
_KEEP = _bernoulli_table(0.75)
_STRAY = _bernoulli_table(0.05)


def synthetic_images(dataset, count, rng):
    """Learnable, MNIST-like images: each class has a fixed sparse pattern
    (a fifth of the pixels on, random intensities); a sample keeps three
    quarters of its class's pixels and adds stray pixels (5%), so a network
    can fit it (the loss falls) while every sample differs."""
    size = sample_size(dataset.sample_shape)

    def number(data):
        return int.from_bytes(data, "little")

    patterns = [number(_noise(rng, size).translate(_ON)) &
                number(_noise(rng, size)) for _ in range(dataset.classes)]
    labels = bytearray(rng.randrange(dataset.classes) for _ in range(count))
    images = []
    for y in labels:
        keep = number(_noise(rng, size).translate(_KEEP))
        stray = number(_noise(rng, size).translate(_STRAY)) & \
            number(_noise(rng, size))
        images.append(((patterns[y] & keep) | stray).to_bytes(size, "little"))
    return b"".join(images), bytes(labels)


def synthetic_tokens(count, vocabulary, rng, distinct=200):
    """A word-id stream from a sparse Markov chain over `distinct` ids: the
    next word is one of two successors of the current word 90% of the time,
    so a language model can learn it."""
    ids = rng.sample(range(vocabulary), distinct)
    successors = dict((w, (rng.choice(ids), rng.choice(ids))) for w in ids)
    stream, current = [], ids[0]
    for _ in range(count):
        stream.append(current)
        current = rng.choice(successors[current]) if rng.random() < 0.9 \
            else rng.choice(ids)
    return stream


def synthetic_splits(dataset, rng, train_samples=None, test_samples=None):
    """(train, test) Splits shaped like `dataset` (its official sample counts
    unless given), drawn from `rng`."""
    if dataset.kind == "tokens":
        # PTB's own sizes: 929589 training and 82430 test words.
        steps = dataset.sample_shape[0]
        train_n = train_samples or (929589 - 1) // steps
        test_n = test_samples or (82430 - 1) // steps
        stream = synthetic_tokens((train_n + test_n) * steps + 2,
                                  dataset.classes, rng)
        cut = train_n * steps + 1
        return (token_split(stream[:cut], steps),
                token_split(stream[cut:], steps))
    train_n = train_samples or dataset.train_count
    test_n = test_samples or dataset.test_count
    images, labels = synthetic_images(dataset, train_n + test_n, rng)
    size = sample_size(dataset.sample_shape)
    return (Split(train_n, images[:train_n * size], labels[:train_n], None),
            Split(test_n, images[train_n * size:], labels[train_n:], None))
