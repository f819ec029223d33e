"""harness.gpu.cudalibs: versions read from the libraries loaded in a process.

No GPU here: the lookups run against the real maps of this process (libc is
loaded, libcudart is not) and the formatting against the codes NVIDIA's
libraries return."""
import os

import pytest

from harness.gpu import cudalibs


@pytest.mark.parametrize("code, text", [(10000, "10.0"), (11020, "11.2"),
                                        (12040, "12.4"), (13000, "13.0")])
def test_cuda_runtime_codes(code, text):
    assert cudalibs.format_cuda(code) == text


@pytest.mark.parametrize("code, text", [(7301, "7.3.1"), (8907, "8.9.7"),
                                        (90100, "9.1.0"), (91002, "9.10.2")])
def test_cudnn_codes(code, text):
    assert cudalibs.format_cudnn(code) == text


@pytest.mark.parametrize("code, text", [(2708, "2.7.8"), (21212, "2.12.12"),
                                        (22703, "2.27.3")])
def test_nccl_codes(code, text):
    assert cudalibs.format_nccl(code) == text


def test_finds_libraries_mapped_into_this_process():
    paths = cudalibs.loaded_libraries()
    libc = cudalibs.find_loaded("libc", paths)
    assert libc is not None and os.path.exists(libc)
    assert os.path.basename(libc).startswith("libc.so") or \
        os.path.basename(libc).startswith("libc-")


def test_prefix_must_end_at_the_name():
    paths = ["/x/libcudart_static.so", "/x/libcudnn_ops_infer.so.8",
             "/y/libcudart-9335f6a2.so.11.0", "/y/libcudnn.so.8.9.7"]
    assert cudalibs.find_loaded("libcudart", paths) == paths[2]
    assert cudalibs.find_loaded("libcudnn", paths) == paths[3]
    assert cudalibs.find_loaded("libnccl", paths) is None


def test_unreadable_maps_mean_no_libraries(tmp_path):
    assert cudalibs.loaded_libraries(str(tmp_path / "missing")) == []


def test_missing_libraries_give_null_versions_with_reasons():
    versions, sources = cudalibs.library_versions()
    assert versions == {"cuda": None, "cudnn": None, "nccl": None}
    assert "no libcudart is loaded" in sources["cuda"]


def test_a_library_without_the_symbol_is_named_in_the_reason():
    libc = cudalibs.find_loaded("libc", cudalibs.loaded_libraries())
    versions, sources = cudalibs.library_versions(fallback=libc)
    assert versions["cudnn"] is None
    assert "{} has no working cudnnGetVersion()".format(libc) in \
        sources["cudnn"]
