"""The CNTK backend's framework imports, made when first used: importing
harness.frameworks never loads a framework the cell does not use, and the
backend imports (and is tested) where CNTK cannot be installed."""


def _cntk():
    import cntk
    return cntk


def _numpy():
    import numpy  # CNTK's own dependency
    return numpy
