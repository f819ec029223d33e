"""Framework-neutral mini-batches.

Timed runs draw their synthetic batch with the framework's own generator,
on the device, once before timing (fast even for fcn5 at batch 4096).
`fixed_batch` is for cross-framework checks: the same seed gives the same
values in every framework, from the standard library alone.
"""
import array
import random
from collections import namedtuple

# inputs/labels are flat array.array buffers in C order; backends reshape.
Batch = namedtuple("Batch", "inputs input_shape labels label_shape")


def label_shape(network, batch_size):
    """Labels are one class per sample, or one token per step for LSTMs."""
    if network.input_dtype == "int64":
        return (batch_size,) + tuple(network.input_shape)
    return (batch_size,)


def fixed_batch(network, batch_size, seed):
    """A deterministic batch for `network`: N(0, 1) inputs or uniform
    token ids, and uniform labels."""
    rng = random.Random(seed)
    shape = (batch_size,) + tuple(network.input_shape)
    count = 1
    for d in shape:
        count *= d
    if network.input_dtype == "int64":
        inputs = array.array("q", (rng.randrange(network.classes)
                                   for _ in range(count)))
    else:
        inputs = array.array("f", (rng.gauss(0.0, 1.0) for _ in range(count)))
    lshape = label_shape(network, batch_size)
    lcount = 1
    for d in lshape:
        lcount *= d
    labels = array.array("q", (rng.randrange(network.classes)
                               for _ in range(lcount)))
    return Batch(inputs, shape, labels, lshape)
