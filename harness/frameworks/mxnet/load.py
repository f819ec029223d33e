"""The MXNet backend's framework import, made when first used: importing
harness.frameworks never loads a framework the cell does not use, and
configure() sets MXNet's environment variables before the library reads
them."""


def _mx():
    import mxnet
    return mxnet
