"""The JAX backend's framework imports, made when first used: importing
harness.frameworks never loads a framework the cell does not use, and the
CPU affinity (configure) is set before XLA sizes its thread pools."""


def _jax():
    import jax
    return jax


def _optax():
    import optax
    return optax


def _np():
    import numpy
    return numpy

