"""Data: the real datasets, their formats, synthetic data, mini-batches."""
