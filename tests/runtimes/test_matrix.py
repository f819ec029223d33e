"""The version matrix and its lock files: the profiles the issue asks for,
validation errors that name file and key, locks that match the matrix, and
lock resolution for another Python and platform."""
import copy
import re

import pytest

from dlrepro import matrix
from dlrepro.images import pylock
from dlrepro.errors import UserError

PROFILES = {
    "pytorch": {"cuda", "cpu"},
    "tensorflow": {"cuda", "tf1", "cpu"},
    "mxnet": {"cuda", "ngc", "cpu"},
    "cntk": {"gpu", "cpu"},
}


@pytest.fixture(scope="module")
def m():
    return matrix.load()


def all_profiles():
    loaded = matrix.load()
    return [(f, p) for f in sorted(loaded) for p in sorted(loaded[f])]


def test_every_profile_the_issue_lists_exists(m):
    for framework, profiles in PROFILES.items():
        assert profiles <= set(m[framework]), framework


def test_facts_that_decide_which_gpus_run(m):
    assert m["pytorch"]["cuda"]["cuda"].startswith(("12.", "13."))
    assert "sm_90" in m["pytorch"]["cuda"]["sass"]
    tf1 = m["tensorflow"]["tf1"]
    assert (tf1["framework_version"], tf1["python"], tf1["cuda"]) == (
        "1.15.5", "3.7", "10.0")
    assert tf1["cudnn"].startswith("7.4")
    assert "tensorflow-gpu==1.15.5" in tf1["pip"]
    mx = m["mxnet"]["cuda"]
    assert {"mxnet-cu112==1.9.1", "numpy==1.23.5"} <= set(mx["pip"])
    assert mx["ptx"] == "" and max(int(s[3:]) for s in mx["sass"]) == 86
    assert m["mxnet"]["ngc"]["framework_in_base"]
    assert "sm_90" in m["mxnet"]["ngc"]["sass"]
    cntk = m["cntk"]["gpu"]
    assert "cntk-gpu==2.7.post2" in cntk["pip"] and cntk["python"] == "3.6"
    assert m["tensorflow"]["cuda"]["framework_version"] == "2.21.0"
    for framework, profile in all_profiles():
        entry = m[framework][profile]
        if entry["device"] == "gpu":
            assert entry["sass"] and entry["min_driver"], (framework, profile)
        else:
            assert not entry["sass"] and not entry["cuda"], (framework, profile)


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.mark.parametrize("framework,profile", all_profiles(),
                         ids=lambda v: str(v))
def test_lock_pins_every_top_level_package_at_its_matrix_version(
        m, framework, profile):
    locked = {_canonical(name): version for name, version, _sha in
              pylock.read_lock(matrix.lock_path(framework, profile))}
    for requirement in m[framework][profile]["pip"]:
        name, version = re.match(r"^([^\[=]+)(?:\[[^\]]*\])?==(.+)$",
                                 requirement).groups()
        assert locked.get(_canonical(name)) == version, requirement


# --- validation --------------------------------------------------------------

VALID = {
    "device": "cpu", "base_image": "debian:12", "python": "3.11",
    "cuda": "", "cudnn": "", "nccl": "", "framework_version": "1.0",
    "pip": ["six==1.17.0"], "pip_index": [], "apt": [], "sass": [],
    "ptx": "", "min_driver": "", "native": True, "glibc": "2.36",
    "notes": "test",
}


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}"
                               for k, v in value.items()) + "}"
    return str(value)


def write_matrix(path, entry):
    lines = ["[demo.cpu]"]
    tables = {k: v for k, v in entry.items()
              if isinstance(v, list) and v and isinstance(v[0], dict)}
    for key, value in entry.items():
        if key not in tables:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, rows in tables.items():
        for row in rows:
            lines.append(f"[[demo.cpu.{key}]]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in row.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_valid_entry_loads_with_defaults(tmp_path):
    loaded = matrix.load(write_matrix(tmp_path / "m.toml", VALID))
    entry = loaded["demo"]["cpu"]
    assert entry["framework_in_base"] is False and entry["pip_no_deps"] is False
    assert entry["sources"] == [] and entry["env"] == {}


def _changed(**changes):
    entry = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is None:
            del entry[key]
        else:
            entry[key] = value
    return entry


BAD = {
    "unknown-key": (_changed(colour="blue"), "unknown keys: colour"),
    "missing-key": (_changed(glibc=None), "is missing glibc"),
    "unpinned-pip": (_changed(pip=["six>=1"]), "pip: 'six>=1' is not pinned"),
    "bare-pip": (_changed(pip=["six"]), "is not pinned"),
    "unpinned-apt": (_changed(apt=["curl"]), "apt package 'curl' is not pinned"),
    "unpinned-build-apt": (_changed(build_apt=["make"]),
                           "build_apt package 'make' is not pinned"),
    "wrong-type": (_changed(native="yes"), "native must be a bool"),
    "bad-device": (_changed(device="tpu"), "device must be cpu or gpu"),
    "bad-python": (_changed(python="three"), "python must be a version"),
    "bad-sha": (_changed(sources=[{"name": "a.tar", "url": "http://x/a.tar",
                                   "sha256": "abc"}]), "sha256 must be 64"),
    "source-keys": (_changed(sources=[{"name": "a.tar", "url": "http://x"}]),
                    "missing: sha256"),
    "bad-fingerprint": (_changed(apt_repos=[{
        "name": "r", "url": "http://x", "suite": "/", "key_url": "http://x/k",
        "key_fingerprint": "1234"}]), "key_fingerprint must be 40"),
    "bad-env": (_changed(env={"lower": "x"}), "env lower must be"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_invalid_entries_are_errors_naming_file_and_key(tmp_path, case):
    entry, message = BAD[case]
    path = write_matrix(tmp_path / "m.toml", entry)
    with pytest.raises(UserError) as info:
        matrix.load(path)
    assert message in str(info.value)
    assert str(path) in str(info.value) and "[demo.cpu" in str(info.value)


def test_malformed_toml_names_the_file(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("[demo.cpu\n")
    with pytest.raises(UserError, match=re.escape(str(path))):
        matrix.load(path)


# --- lock resolution for other platforms ----------------------------------------

def test_platform_tags_follow_glibc():
    tags = pylock.platform_tags(pylock.Target("3.6", "2.27"))
    assert tags[0] == "manylinux_2_27_x86_64"
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64",
            "manylinux1_x86_64", "manylinux_2_17_x86_64"} <= set(tags)
    assert "manylinux_2_28_x86_64" not in tags


def test_target_args_are_empty_for_this_host_only():
    assert pylock.target_args(pylock.host_target()) == []
    args = pylock.target_args(pylock.Target("3.6", "2.27"))
    assert args[:2] == ["--python-version", "3.6"]
    assert "--only-binary=:all:" in args
    # A hand-written closure may pin a source distribution (gast 0.2.2).
    assert "--only-binary=:all:" not in pylock.target_args(
        pylock.Target("3.7", "2.27"), no_deps=True)


def test_pin_reproduces_the_python36_lock_of_cntk(m):
    """Resolving for CPython 3.6 on glibc 2.27 from this host gives the
    committed lock byte for byte (needs the package index)."""
    text = pylock.lock_profile_text("cntk", "cpu", m["cntk"]["cpu"])
    assert text.startswith("# cntk-cpu: generated by invoke pin")
    assert text == matrix.lock_path("cntk", "cpu").read_text()


def _item(name, version, requires_python=None, requires_dist=()):
    return {"metadata": {"name": name, "version": version,
                         "requires_python": requires_python,
                         "requires_dist": list(requires_dist)}}


def test_cross_resolution_checks_requires_python_and_target_markers():
    """pip resolving for another Python ignores both; dlrepro.images.pylock checks
    them against the target (found when Python 3.7's wheelhouse failed)."""
    target = pylock.Target("3.7", "2.27")
    installs = [
        _item("termcolor", "3.3.0", ">=3.10"),
        _item("six", "1.17.0", ">=2.7, !=3.0.*"),
        _item("Markdown", "3.4.4", ">=3.7", [
            'importlib-metadata>=4.4; python_version < "3.10"',
            'coverage; extra == "testing"']),
        _item("grpcio", "1.62.3", None, ['futures>=2.2.0; python_version < "3.2"']),
    ]
    assert pylock.requires_python_violations(installs, target) == [
        ("termcolor", "3.3.0", ">=3.10")]
    assert pylock.missing_requirements(installs, target) == [
        ("importlib-metadata>=4.4", "Markdown")]
    newer = pylock.Target("3.11", "2.36")
    assert pylock.requires_python_violations(installs, newer) == []
    assert pylock.missing_requirements(installs, newer) == []


def test_every_cross_platform_lock_fits_its_python(m):
    """The committed locks were resolved with those checks: re-resolving
    the Python 3.7 closure changes nothing (needs the package index)."""
    text = pylock.lock_profile_text("tensorflow", "tf1", m["tensorflow"]["tf1"])
    assert text == matrix.lock_path("tensorflow", "tf1").read_text()
