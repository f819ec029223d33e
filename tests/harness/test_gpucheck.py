"""dlrepro.images.gpucheck: a GPU image checked without a GPU. Its
comparisons on reports made by hand, and its probes in real containers: the
PyTorch CPU image (Python 3.11) and the CNTK image (Python 3.6, where the
harness's fat-binary reader must run too). The GPU images themselves are
checked by `invoke check-image`, outside the per-commit CI
(tests/runtimes/test_gpu_images.py, DLREPRO_GPU_IMAGES=1)."""
import json

import pytest

from paths import ROOT

from dlrepro import matrix
from dlrepro.images import gpucheck

from dlrepro.images import build as images
from dockerenv import PREFIX


@pytest.fixture(scope="module")
def pytorch_image(docker_client, test_base):
    """The PyTorch CPU image the Docker tests share (built when missing)."""
    return images.ensure("pytorch", "cpu", matrix.load(),
                         base_image=test_base, client=docker_client,
                         name_prefix=PREFIX, log=lambda _m: None)


@pytest.mark.parametrize("expected,found,same", [
    ("12.8", "12.8", True), ("11.2.2", "11.2", True), ("9.10.2", "9.10.2", True),
    ("9.10.2", "9.10.1", False), ("12.8", "12.9", False), ("2.27.5", None, False),
    ("", "12.8", False)])
def test_versions_agree_as_far_as_both_go(expected, found, same):
    assert gpucheck.same_version(expected, found) is same


def report(sass, ptx, libraries, said):
    return {"framework": "pytorch", "profile": "cuda", "image": "img",
            "import": {"ok": True, "version": "2.9.1", "why_not": None},
            "versions": said,
            "libraries": {"versions": libraries, "sources": {}},
            "kernels": {"main": "/x/libtorch_cuda.so", "sass": sass,
                        "ptx": ptx, "why_not": None, "libraries": {}},
            "cpu_cell": {"status": "ok", "why_not": None, "mean_s": 0.1}}


def test_an_image_that_holds_what_the_matrix_says_agrees():
    entry = matrix.load()["pytorch"]["cuda"]
    labels = {"org.dlrepro.cuda": "12.8", "org.dlrepro.cudnn": "9.10.2",
              "org.dlrepro.nccl": "2.27.5"}
    found = {"cuda": "12.8", "cudnn": "9.10.2", "nccl": "2.27.5"}
    sass = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    made = report(sass, [], found, dict(found))
    made["comparisons"] = gpucheck.comparisons(entry, labels, made)
    assert gpucheck.differences(made) == []
    assert gpucheck.summary_lines(made)[-1] == \
        "  agrees with the matrix and its labels"


def test_a_version_the_harness_cannot_report_is_said_not_a_difference():
    entry = matrix.load()["tensorflow"]["cuda"]
    labels = {"org.dlrepro.cuda": "12.5", "org.dlrepro.cudnn": "9.3.0",
              "org.dlrepro.nccl": "2.27.7"}
    found = {"cuda": "12.5", "cudnn": "9.3.0", "nccl": "2.27.7"}
    said = {"cuda": "12.5.1", "cudnn": "9", "nccl": None, "version_sources":
            {"nccl": "no libnccl is loaded in this process"}}
    made = report(["sm_60", "sm_70", "sm_80", "sm_89"], ["compute_90"],
                  found, said)
    made["comparisons"] = gpucheck.comparisons(entry, labels, made)
    assert gpucheck.differences(made) == []
    assert "  not reported by harness versions: nccl (no libnccl is loaded "\
        "in this process)" in gpucheck.summary_lines(made)


def test_a_library_the_matrix_says_is_absent_must_be_absent():
    entry = dict(matrix.load()["caffe"]["cuda"])
    assert entry["cudnn"] == ""  # Ubuntu's caffe-cuda is built without it
    labels = {"org.dlrepro.cuda": entry["cuda"], "org.dlrepro.cudnn": "",
              "org.dlrepro.nccl": ""}
    found = {"cuda": "9.1", "cudnn": None, "nccl": None}
    made = report(entry["sass"], [], found, dict(found))
    made["comparisons"] = gpucheck.comparisons(entry, labels, made)
    assert gpucheck.differences(made) == []
    made["libraries"]["versions"]["cudnn"] = "7.6.5"
    made["comparisons"] = gpucheck.comparisons(entry, labels, made)
    assert [r["field"] for r in gpucheck.differences(made)] == \
        ["cudnn (label vs library)"]


def test_each_difference_is_named_with_both_sides():
    entry = matrix.load()["pytorch"]["cuda"]
    labels = {"org.dlrepro.cuda": "12.8", "org.dlrepro.cudnn": "9.10.2",
              "org.dlrepro.nccl": "2.27.5"}
    found = {"cuda": "12.8", "cudnn": "9.1.0", "nccl": "2.27.5"}
    made = report(["sm_80", "sm_90"], ["compute_90"], found, dict(found))
    made["comparisons"] = gpucheck.comparisons(entry, labels, made)
    wrong = {row["field"] for row in gpucheck.differences(made)}
    assert wrong == {"cudnn (label vs library)",
                     "cudnn (matrix vs harness versions)", "sass",
                     "ptx (newest)"}
    lines = gpucheck.summary_lines(made)
    assert "  DIFFERS ptx (newest): matrix [], image ['compute_90']" in lines


def test_the_probes_in_a_cpu_image(pytorch_image):
    tag = pytorch_image
    assert gpucheck.imports(tag, "torch")["ok"]
    assert gpucheck.imports(tag, "no_such_module")["why_not"] == \
        "ModuleNotFoundError: No module named 'no_such_module'"
    kernels = gpucheck.kernels(tag, "pytorch")
    assert kernels["main"] is None
    assert kernels["why_not"] == "no library with GPU kernels found"
    cell = gpucheck.cpu_cell(tag, "pytorch", "cpu")
    assert cell["status"] == "ok" and cell["mean_s"] > 0


def test_the_kernel_reader_runs_on_python_36(cntk_image):
    kernels = gpucheck.kernels(cntk_image, "cntk")
    # The CPU build of CNTK carries no GPU code; the reader ran without
    # error on the image's Python 3.6.
    assert kernels == {"main": None, "sass": [], "ptx": [], "sass_partial": [],
                       "ptx_partial": [], "libraries": {},
                       "why_not": "no library with GPU kernels found"}


CHECKED = sorted((ROOT / "docs" / "measurements").glob("image-checks-*/*.json"))


@pytest.mark.parametrize("path", CHECKED, ids=[p.stem for p in CHECKED])
def test_the_matrix_says_what_the_images_checked_here_hold(path):
    """The reports of `invoke check-image` kept in docs/measurements: the
    matrix (and so the gate) must still agree with what each image was
    found to hold; an edit to the matrix that contradicts one fails here."""
    report = json.loads(path.read_text())
    entry = matrix.load()[report["framework"]][report["profile"]]
    rows = gpucheck.comparisons(entry, report["labels"], report)
    assert [row for row in rows if row["agrees"] is False] == []
