"""Result files: deterministic JSON, atomic writes, version checks."""
import json
import os

import pytest

from harness import resultfile


def test_json_is_sorted_indented_and_ends_with_newline():
    text = resultfile.dumps({"b": 1, "a": [1, 2]})
    assert text == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_nan_is_refused_so_it_must_be_mapped_first():
    with pytest.raises(ValueError):
        resultfile.dumps({"loss": float("nan")})
    assert resultfile.finite_or_none(float("inf")) is None
    assert resultfile.finite_or_none(1.5) == 1.5


def test_write_atomic_replaces_whole_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "r.json"
    resultfile.write_atomic(str(path), {"schema_version": 1, "x": 1})
    resultfile.write_atomic(str(path), {"schema_version": 1, "x": 2})
    assert json.loads(path.read_text())["x"] == 2
    assert os.listdir(tmp_path) == ["r.json"]


def test_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "r.json"
    resultfile.write_atomic(str(path), {"schema_version": 1, "x": 1})
    with pytest.raises(ValueError):
        resultfile.write_atomic(str(path), {"x": float("nan")})
    assert json.loads(path.read_text())["x"] == 1
    assert os.listdir(tmp_path) == ["r.json"]


def test_load_rejects_unknown_versions(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('{"schema_version": 2}')
    with pytest.raises(ValueError, match="schema_version 2 is not supported"):
        resultfile.load(str(path))
