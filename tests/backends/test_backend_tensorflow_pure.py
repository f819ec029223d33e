"""The TensorFlow backend's pure helpers: padding and layout choices, its
compile modes and where its CUDA versions come from, as plain Python
without TensorFlow. What needs TensorFlow is
tests/backends/test_backend_tensorflow_venv.py."""
import pytest

from harness import networks as nets
from harness.frameworks.tensorflow import backend as tfb


# --- pure helpers (no TensorFlow) ---------------------------------------------

def test_data_format_is_nchw_on_gpu_and_nhwc_on_cpu():
    assert tfb.data_format("gpu") == "channels_first"
    assert tfb.data_format("cpu") == "channels_last"


def test_input_shape_is_transposed_for_images_only():
    assert tfb.input_shape_in(nets.get("alexnet"), "channels_last") == (224, 224, 3)
    assert tfb.input_shape_in(nets.get("alexnet"), "channels_first") == (3, 224, 224)
    assert tfb.input_shape_in(nets.get("lstm"), "channels_last") == (32,)
    assert tfb.input_shape_in(nets.get("fcn5"), "channels_last") == (26752,)


@pytest.mark.parametrize("size, kernel, stride, pads", [
    (224, 11, 4, (3, 4)),   # alexnet's first conv: the description's pads
    (224, 7, 2, (2, 3)),    # TensorFlow puts the odd pixel after
    (56, 3, 2, (0, 1)),
    (32, 3, 1, (1, 1)),
    (32, 1, 1, (0, 0)),
    (7, 3, 2, (1, 1)),
])
def test_same_padding_follows_tensorflow(size, kernel, stride, pads):
    assert tfb.same_padding(size, kernel, stride) == pads


def _convs_and_pools():
    def walk(resolved):
        for r in resolved:
            yield r
            if r.children is not None:
                body, shortcut = r.children
                for child in walk(body + (shortcut or [])):
                    yield child
    for network in nets.NETWORKS.values():
        for r in walk(nets.resolve(network)):
            if type(r.layer) in (nets.Conv, nets.Pool):
                yield network.name, r


def _conv_out(n, kernel, stride, padding, extra):
    if padding == "same":
        return -(-n // stride)
    before, after = extra or (0, 0)
    return (n + before + after - kernel) // stride + 1


def test_conv_padding_reproduces_every_described_conv():
    seen = 0
    for name, r in _convs_and_pools():
        if type(r.layer) is not nets.Conv:
            continue
        layer = r.layer
        padding, extra = tfb.keras_padding(r.in_shape[1:], layer.kernel,
                                          layer.stride, layer.pad)
        out = _conv_out(r.in_shape[1], layer.kernel, layer.stride, padding,
                        extra)
        assert out == r.out_shape[1], (name, layer)
        if padding == "same":
            assert tfb.same_padding(r.in_shape[1], layer.kernel,
                                    layer.stride) == layer.pad
        seen += 1
    assert seen > 100  # resnet50 and resnet-56 alone have 110


def test_conv_padding_takes_same_when_exact_else_zero_padding():
    assert tfb.keras_padding((224, 224), 11, 4, (3, 4)) == ("same", None)
    assert tfb.keras_padding((224, 224), 7, 2, (3, 3)) == ("valid", (3, 3))
    assert tfb.keras_padding((56, 56), 3, 2, (1, 1)) == ("valid", (1, 1))
    assert tfb.keras_padding((56, 56), 1, 2, (0, 0)) == ("valid", None)
    assert tfb.keras_padding((32, 32), 3, 1, (1, 1)) == ("same", None)


def test_pool_padding_is_same_for_every_described_pool():
    pools = [(name, r) for name, r in _convs_and_pools()
             if type(r.layer) is nets.Pool]
    assert {name for name, _ in pools} == {"alexnet", "resnet50", "alexnet-r"}
    for name, r in pools:
        assert tfb.pool_padding(r.in_shape[1:], r.layer.kernel,
                                r.layer.stride) == "same", name


def test_pool_padding_falls_back_where_same_differs_from_ceil_mode():
    # Odd sizes: SAME yields one window more than ceil mode.
    assert tfb.pool_padding((15, 15), 3, 2) is None
    # SAME would pad one pixel before the input.
    assert tfb.pool_padding((8, 8), 4, 2) is None
    assert tfb.pool_padding((16, 16), 3, 2) == "same"


def test_compile_modes_put_tensorflows_default_first():
    # The cell's compile null means the first: tf.function, XLA off, as
    # TensorFlow ships.
    assert tfb.CAPABILITIES.compile_modes[0] == "function"
    assert set(tfb.CAPABILITIES.compile_modes) == {"function", "xla", "none"}



class _FakeTf(object):
    """TensorFlow's build info for a CUDA build (none can be installed
    here); `sysconfig` without get_build_info stands for TensorFlow 1.15."""

    def __init__(self, build=None):
        class sysconfig(object):
            pass
        if build is not None:
            sysconfig.get_build_info = staticmethod(lambda: build)
        self.sysconfig = sysconfig


def test_cuda_versions_come_from_build_info_then_loaded_libraries():
    found, sources = tfb._cuda_versions(_FakeTf(
        {"cuda_version": "12.5.1", "cudnn_version": "9", "is_cuda_build": True}))
    assert found["cuda"] == "12.5.1" and found["cudnn"] == "9"
    assert sources["cuda"] == "tf.sysconfig.get_build_info()"
    # NCCL is not in the build info; no GPU library is loaded in this process.
    assert found["nccl"] is None
    assert "no libnccl is loaded" in sources["nccl"]


def test_cuda_versions_on_tensorflow_1_come_from_loaded_libraries():
    found, sources = tfb._cuda_versions(_FakeTf())
    assert found == {"cuda": None, "cudnn": None, "nccl": None}
    assert "no libcudart is loaded" in sources["cuda"]
