"""harness.provenance's record of what the kernel does with freed memory,
read from a /sys laid out as the kernel lays it out (a real balloon's
reporting cannot be switched on here; the reading of this machine's own
/sys is the last test)."""
import json
import os

import pytest

from harness import provenance


def device(root, name, kind, features):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "device").write_text(f"0x{kind:04x}\n")
    (folder / "features").write_text(features + "\n")


def bits(*on, width=64):
    return "".join("1" if i in on else "0" for i in range(width))


@pytest.fixture
def order(tmp_path):
    path = tmp_path / "page_reporting_order"
    path.write_text("9\n")
    return str(path)


def test_a_balloon_that_reports_free_pages_is_recorded_with_its_order(
        tmp_path, order):
    devices = tmp_path / "devices"
    device(devices, "virtio0", 0x0002, bits(5))   # a block device: no
    device(devices, "virtio1", 0x0005, bits(1, 2, 5, 7))
    assert provenance.free_page_reporting(str(devices), order) == {"order": 9}


def test_a_balloon_without_reporting_and_other_devices_are_false(
        tmp_path, order):
    devices = tmp_path / "devices"
    device(devices, "virtio0", 0x0005, bits(1, 2))  # stats, deflate on OOM
    device(devices, "virtio1", 0x0001, bits(5))     # a network card
    assert provenance.free_page_reporting(str(devices), order) is False


def test_no_virtio_bus_is_false_and_an_unreadable_order_is_null(tmp_path):
    assert provenance.free_page_reporting(
        str(tmp_path / "none"), str(tmp_path / "none")) is False
    device(tmp_path, "virtio0", 0x0005, bits(5))
    assert provenance.free_page_reporting(
        str(tmp_path), str(tmp_path / "none")) == {"order": None}


@pytest.mark.parametrize("text, mode", [
    ("always [madvise] never", "madvise"),
    ("[always] madvise never", "always"),
    ("garbled", None),
])
def test_the_transparent_huge_page_mode_is_the_bracketed_word(
        tmp_path, text, mode):
    path = tmp_path / "enabled"
    path.write_text(text + "\n")
    assert provenance.transparent_hugepage(str(path)) == mode


def test_this_machine_is_recorded_as_its_sys_says():
    memory = provenance.host_environment()["memory"]
    enabled = provenance.TRANSPARENT_HUGEPAGE
    if os.path.exists(enabled):
        with open(enabled) as handle:
            assert f"[{memory['transparent_hugepage']}]" in handle.read()
    reporting = memory["free_page_reporting"]
    assert reporting is False or isinstance(reporting, dict)
    json.dumps(memory)
