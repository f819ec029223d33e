"""harness.gpu.fatbin: the GPU architectures a library carries, read from its
fat binaries (a real nvcc object, and containers built byte by byte for
what a real one rarely shows: damage, stray magic numbers)."""
import json
import struct
import subprocess
import sys

from harness.gpu import fatbin

from paths import ROOT

GOLDEN = ROOT / "tests" / "golden" / "fatbin" / "kernels-sm75-sm90-ptx90.o"


def entry(kind, arch, payload=b"\0" * 24, size=64):
    head = struct.pack("<HHIQIIHHI", kind, 0x101, size, len(payload), 0, 0,
                       0, 0, arch)
    return head + b"\0" * (size - len(head)) + payload


def container(*entries):
    body = b"".join(entries)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def elf(*parts):
    return fatbin.ELF_MAGIC + b"\0" * 60 + b"".join(parts)


def test_an_nvcc_object_reads_as_built():
    kernels = fatbin.read_file(str(GOLDEN))
    assert kernels["sass"] == ["sm_75", "sm_90"]
    assert kernels["ptx"] == ["compute_90"]
    assert kernels["entries"] == 3


def test_containers_amid_other_bytes_and_header_sizes_of_newer_toolkits(
        tmp_path):
    library = tmp_path / "libk.so"
    library.write_bytes(elf(
        b"x" * 13, container(entry(2, 70), entry(1, 70)),
        b"\0" * 5, container(entry(2, 100, size=112), entry(1, 120, size=80))))
    assert fatbin.read_file(str(library)) == {
        "containers": 2, "entries": 4, "sass": ["sm_70", "sm_100"],
        "ptx": ["compute_70", "compute_120"], "sass_partial": [],
        "ptx_partial": []}


def test_an_architecture_few_sources_add_is_partial(tmp_path):
    """The arch list applies to every source file; one file may add an
    architecture for a kernel of its own (PyTorch: one sm_89 kernel in 397
    fat binaries)."""
    general = [container(entry(2, 80), entry(2, 90)) for _ in range(3)]
    special = container(entry(2, 80), entry(2, 89), entry(2, 90),
                        entry(1, 90), entry(0x40, 90))
    library = tmp_path / "libk.so"
    library.write_bytes(elf(*general, special))
    kernels = fatbin.read_file(str(library))
    assert (kernels["sass"], kernels["sass_partial"]) == \
        (["sm_80", "sm_90"], ["sm_89"])
    assert (kernels["ptx"], kernels["ptx_partial"]) == ([], ["compute_90"])


def test_a_stray_magic_or_a_damaged_container_is_not_read_as_kernels(
        tmp_path):
    stray = struct.pack("<I", 0xBA55ED50) + b"\x07" * 40
    # Its header claims 8 bytes more than its one entry holds.
    body = entry(2, 80)
    truncated = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body) + 8) + body
    wrong_size = container(entry(2, 86, size=8))
    library = tmp_path / "libk.so"
    library.write_bytes(elf(stray, truncated, wrong_size,
                            container(entry(2, 61))))
    assert fatbin.read_file(str(library))["sass"] == ["sm_61"]
    library.write_bytes(elf(stray, truncated))
    assert fatbin.read_file(str(library)) is None


def test_files_that_are_not_elf_are_skipped(tmp_path):
    text = tmp_path / "notes.so.txt"
    text.write_bytes(container(entry(2, 90)))
    assert fatbin.read_file(str(text)) is None
    assert fatbin.scan([str(tmp_path)]) == {}


def test_the_command_names_the_library_with_most_kernels(tmp_path):
    (tmp_path / "libsmall.so").write_bytes(elf(container(entry(2, 50))))
    (tmp_path / "libmain.so.2").write_bytes(elf(container(
        entry(2, 70), entry(2, 80), entry(1, 90))))
    proc = subprocess.run([sys.executable, "-m", "harness", "kernels",
                           str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    report = json.loads(proc.stdout)
    assert report["main"] == str(tmp_path / "libmain.so.2")
    assert report["libraries"][report["main"]]["ptx"] == ["compute_90"]
    assert len(report["libraries"]) == 2


def test_a_bundled_nvidia_library_is_not_the_frameworks_own():
    report = {"/w/libs/libcudnn.so.7": {"entries": 1642},
              "/w/libs/libnccl.so.2": {"entries": 293},
              "/w/libs/libCntk.Math-2.7.so": {"entries": 96},
              "/w/libs/libCntk.Core-2.7.so": {"entries": 12}}
    assert fatbin.main_library(report) == "/w/libs/libCntk.Math-2.7.so"
    assert fatbin.main_library({"/w/libcublas.so.12": {"entries": 9}}) is None


def test_a_module_that_is_not_here_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "harness", "kernels",
                           "--module", "no_such_package_dlrepro"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == \
        "harness: error: no package no_such_package_dlrepro here"
