"""The Caffe backend.

Caffe 1.0 exists here only as Ubuntu 18.04's packages (pycaffe on Python
3.6), which these machines have only in the Caffe image. Two groups of
tests, as for CNTK:
- static ones that always run: the plain-Python shape and padding
  arithmetic, the BLAS classification and dpkg reading (Python 3.6 syntax,
  the import without Caffe and the translators: test_backend_contract);
- framework ones, run by the image's Python (tests/caffeenv.py; or the
  interpreter DLREPRO_CAFFE_PYTHON names): skipped with the reason where no
  Docker engine or base image is available, failed instead in CI
  (DLREPRO_REQUIRE_DOCKER).
"""
import caffeenv
import probes
import pytest
from probes import run_probe
from workercells import forked_trains_as_alone, small_cells

from harness import networks as nets
from harness.frameworks.caffe import backend


# --- static: always run ------------------------------------------------------

def test_training_is_the_solvers_own_step():
    steps = probes.backend_calls(backend, "step")
    assert len(steps) == 1
    assert [a.value for a in steps[0].args] == [1]


def test_only_alexnets_first_convolution_needs_spliced_padding():
    explicit = set()
    for network in nets.NETWORKS.values():
        for r in probes.walk(nets.resolve(network)):
            if type(r.layer) is nets.Conv and not isinstance(
                    backend.conv_padding(r.layer), int):
                explicit.add((network.name, r.layer.pad))
    assert explicit == {("alexnet", (3, 4))}


@pytest.mark.parametrize("size", range(1, 40))
@pytest.mark.parametrize("kernel, stride", [(3, 2), (3, 3), (1, 2), (2, 2)])
def test_pool_size_is_the_descriptions_ceil_mode(size, kernel, stride):
    if size < kernel:
        return
    layer = nets.Pool("max", kernel, stride)
    assert backend.pool_size(size, layer) == nets._pool_out(size, kernel,
                                                            stride)


@pytest.mark.parametrize("path, kind", [
    ("/usr/lib/x86_64-linux-gnu/openblas/libblas.so.3", "OpenBLAS"),
    ("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", "reference"),
    ("/usr/lib/x86_64-linux-gnu/atlas/libblas.so.3", "ATLAS"),
    ("/opt/intel/mkl/lib/libmkl_rt.so", "MKL"),
    ("/usr/lib/libblas.so.3", "unknown"),
    (None, None),
])
def test_blas_is_named_from_the_path_the_alternative_resolved_to(path, kind):
    assert backend.blas_kind(path) == kind


def test_loaded_blas_finds_the_library_and_the_openblas_core():
    paths = ["/usr/lib/x86_64-linux-gnu/libcaffe.so.1.0.0",
             "/usr/lib/x86_64-linux-gnu/openblas/libblas.so.3",
             "/usr/lib/x86_64-linux-gnu/libopenblasp-r0.2.20.so"]
    assert backend.loaded_blas(paths) == {
        "library": paths[1], "kind": "OpenBLAS", "openblas": paths[2]}
    assert backend.loaded_blas(paths[:1]) == {
        "library": None, "kind": None, "openblas": None}


def test_package_versions_are_read_from_dpkgs_status(tmp_path):
    status = tmp_path / "status"
    status.write_text(
        "Package: python3-caffe-cpu\nStatus: install ok installed\n"
        "Version: 1.0.0-6\n\n"
        "Package: libcaffe-cuda1\nStatus: deinstall ok config-files\n"
        "Version: 1.0.0-6build1\n\n"
        "Package: zlib1g\nStatus: install ok installed\nVersion: 1:1.2.11\n")
    assert backend.package_versions(str(status)) == {
        "python3-caffe-cpu": "1.0.0-6"}
    assert backend.package_versions(str(tmp_path / "absent")) == {}


# --- with Caffe: in its image -------------------------------------------------

@pytest.fixture(scope="module")
def caffe_python():
    return str(caffeenv.python())


CONVENTIONS_PROBE = probes.conventions_probe("""
    import json, os, random, tempfile
    import numpy as np
    from harness import networks as nets
    from harness.frameworks.caffe import backend
    backend.configure(None, "cpu", 0)
    caffe = backend._caffe()

    def run(layer, shape, ones=False):
        network = nets.Network("probe", shape, "float32", 2, [layer], 0.1,
                               0.0, "synthetic", "one layer")
        proto = backend.net_spec(network, 1, loss=False).to_proto()
        handle, path = tempfile.mkstemp(suffix=".prototxt")
        with os.fdopen(handle, "w") as out:
            out.write(str(proto))
        net = caffe.Net(path, caffe.TEST)
        os.unlink(path)
        if ones:
            for blobs in net.params.values():
                for blob in blobs:
                    blob.data[...] = 1.0
        rng = random.Random(7)
        x = [rng.uniform(-1, 1) for _ in range(2 * shape[1] * shape[2])]
        net.blobs["data"].data[...] = np.array(x, np.float32).reshape(
            (1,) + shape)
        net.forward()
        out = np.array(net.blobs["output"].data)
        return {"x": x, "y": out.ravel().tolist(),
                "shape": list(out.shape[1:])}
""")


class TestCaffeProbes(probes.BackendChecks):
    """Networks, layer conventions and training, as for MXNet and CNTK;
    Caffe's LSTM keeps one bias vector per gate, as the description does."""
    FRAMEWORK, PYTHON = "caffe", "caffe_python"
    CONVENTIONS = CONVENTIONS_PROBE


VERSIONS_PROBE = """
    import json
    from harness import threads
    threads.apply(2)
    from harness.frameworks.caffe import backend
    backend.configure(2, "cpu", 0)
    info = backend.versions("cpu")
    info["effective_threads"] = backend.effective_threads()
    print(json.dumps(info))
"""


def test_caffe_version_packages_and_the_blas_it_loaded(caffe_python, root):
    from dlrepro import matrix
    info = run_probe(caffe_python, root, VERSIONS_PROBE)
    assert info["framework_version"] == \
        matrix.load()["caffe"]["cpu"]["framework_version"]
    build = info["framework_build"]
    assert build["packages"]["python3-caffe-cpu"] == "1.0.0-6"
    assert build["cuda_build"] is False
    # The alternative resolved to OpenBLAS, not the reference BLAS that
    # apt picks without recommends.
    assert build["blas"] == "OpenBLAS", build
    assert "/openblas/" in build["blas_library"]
    assert build["openblas_threads"] == info["effective_threads"] == 2
    assert (info["cuda"], info["cudnn"], info["nccl"]) == (None, None, None)


def test_caffe_cell_is_valid_and_one_thread_is_really_used(
        make_cell, caffe_python, root, tmp_path, schema):
    cell = make_cell({"framework": "caffe", "network": "fcn-r",
                      "dataset": "mnist", "batch_size": 64,
                      "global_batch_size": 64, "iterations": 8})
    result = probes.one_thread_cell(caffe_python, root, tmp_path, cell,
                                    schema)
    assert result["environment"]["framework_build"]["blas"] == "OpenBLAS"


# --- the profiles ----------------------------------------------------------------

def _stack(profile):
    from dlrepro import matrix
    entry = matrix.load()["caffe"][profile]
    return {"sass": entry["sass"], "ptx": entry["ptx"], "cuda": entry["cuda"],
            "min_driver": entry["min_driver"]}


def test_hopper_gate_refuses_ubuntus_cuda_build_and_jits_nvcaffe():
    from harness.gpu import compat
    ubuntu = compat.check((9, 0), "570.124.06", _stack("cuda"))
    assert ubuntu["verdict"] == compat.UNSUPPORTED, ubuntu
    assert "no machine code for sm_90" in ubuntu["reason"]
    # Pascal, which its SASS covers, runs natively.
    assert compat.check((6, 1), "570.124.06", _stack("cuda"))["verdict"] == \
        compat.NATIVE
    nvcaffe = compat.check((9, 0), "570.124.06", _stack("nvcaffe"))
    assert nvcaffe["verdict"] == compat.PTX_JIT, nvcaffe


def test_cpu_image_holds_exactly_the_pinned_apt_closure(caffe_image):
    import subprocess
    from dlrepro import matrix
    pinned = dict(p.split("=", 1) for p in matrix.load()["caffe"]["cpu"]["apt"])
    proc = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", caffe_image,
         "dpkg-query", "-W", "-f", "${Package}=${Version}\\n"],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    installed = dict(line.split("=", 1) for line in proc.stdout.split())
    for name, version in pinned.items():
        assert installed.get(name) == version, name
    # The reference BLAS, the pitfall without recommends, is not there.
    assert "libblas3" not in installed


def test_a_forked_child_trains_as_a_process_of_its_own(
        make_cell, caffe_python, root, tmp_path):
    # The fork server in Caffe's image imports Caffe before it forks
    # (harness.forkserver.PRELOAD): each child's losses must equal those of
    # a process of its own, step by step.
    cells = small_cells(make_cell, "caffe", ("fcn-r", "lstm32"))
    forked = forked_trains_as_alone(root, caffe_python, "caffe", tmp_path,
                                    cells)
    assert forked[0]["isolation"]["parent"]["preload"]["threads"][
        "after"] == 1
    # glog quieted before libcaffe loaded in the server: no INFO line of
    # the children's net set-up in the server's standard error
    assert "Initializing net" not in (tmp_path / "log").read_text()
