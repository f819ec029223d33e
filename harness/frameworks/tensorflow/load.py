"""The TensorFlow backend's framework imports, made when first used:
importing harness.frameworks never loads a framework the cell does not use,
and the thread variables harness.threads sets are in place before
TensorFlow reads them (numpy comes with TensorFlow)."""


def _tf():
    import tensorflow as tf
    return tf


def _np():
    import numpy
    return numpy
