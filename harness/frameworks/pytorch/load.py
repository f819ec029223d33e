"""The PyTorch backend's framework import, made when first used: importing
harness.frameworks never loads a framework the cell does not use, and the
thread variables harness.threads sets are in place before PyTorch reads
them."""


def _torch():
    import torch
    return torch
