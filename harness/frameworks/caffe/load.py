"""The Caffe backend's framework imports, made when first used: importing
harness.frameworks never loads a framework the cell does not use."""
import os


def _caffe():
    # glog's INFO lines (every layer Caffe sets up) would drown the log;
    # errors still print.
    os.environ.setdefault("GLOG_minloglevel", "2")
    import caffe
    return caffe


def _numpy():
    import numpy  # pycaffe's own dependency
    return numpy
