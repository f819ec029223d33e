"""Caffe: backend.py (model translation, single-process training) and
parallel.py (data-parallel training). Importing this package loads no
framework."""
