"""The registry lock and what reads it, without a registry: names given to
--registry, which entry a node pulls, the refusal of an image that is not
the locked one, the pullable reference a result and the reports show, and
progress lines in a log (tests/runtimes/test_registry.py does it all for real)."""
import io
import json

import pytest

from dlrepro.bench import report
from dlrepro.errors import UserError
from dlrepro.images import registry, registrylock, transfer
from dlrepro.present import provenance

REF = "registry.example.org:5000/team/mxnet@sha256:" + "a" * 64


def entry(**changes):
    return dict({"framework": "mxnet", "profile": "cpu", "recipe": "r" * 64,
                 "tag": "dlrepro/mxnet:cpu-rrrrrrrrrrrr", "reference": REF,
                 "image_id": "sha256:" + "1" * 64, "lock_sha256": "l" * 64,
                 "base": "python:3.11", "pushed_at": "2026-12-04T20:00:00Z"},
                **changes)


@pytest.mark.parametrize("given,name", [
    ("registry.example.org:5000/team", "registry.example.org:5000/team"),
    ("https://registry.example.org/team/", "registry.example.org/team"),
    ("localhost:5000", "localhost:5000"),
])
def test_registry_names(given, name):
    assert registry.registry_name(given) == name


@pytest.mark.parametrize("given", ["team/images", "", "host.org/Team",
                                   "host.org/x:tag"])
def test_a_bad_registry_name_is_one_line(given):
    with pytest.raises(UserError) as info:
        registry.registry_name(given)
    assert "\n" not in str(info.value)


def test_the_lock_is_written_whole_and_read_back(tmp_path):
    path = tmp_path / "registry.lock.json"
    registry.write_lock([entry()], path)
    assert registry.read_lock(path) == [entry()]
    assert not list(tmp_path.glob(".tmp-*"))
    path.write_text(json.dumps({"images": [entry(reference="x/mxnet:cpu")]}))
    with pytest.raises(UserError, match="is not a registry lock: x/mxnet:cpu "
                                        "is not by digest"):
        registry.read_lock(path)


def test_a_node_picks_by_recipe_else_by_lock_file_newest_first():
    old = entry(pushed_at="2026-12-01T00:00:00Z",
                reference=REF.replace("a" * 64, "b" * 64))
    other = entry(recipe="o" * 64, lock_sha256="m" * 64)
    entries = [old, entry(), other]
    assert registry.candidates(entries, "mxnet", "cpu", recipe="r" * 64) \
        == [entry(), old]
    assert registry.candidates(entries, "mxnet", "cpu",
                               lock_sha256="m" * 64) == [other]
    assert registry.candidates(entries, "mxnet", "cpu", recipe="r" * 64,
                               registry="elsewhere.org/x") == []


def test_an_image_that_is_not_the_locked_one_is_refused():
    locked = entry()
    assert registry.refusal(locked, {"org.dlrepro.recipe": "r" * 64},
                            locked["image_id"]) is None
    why = registry.refusal(locked, {})
    assert why == (f"the pulled image {REF} carries recipe none, the lock "
                   f"says rrrrrrrrrrrr: refused")
    why = registry.refusal(locked, {"org.dlrepro.recipe": "r" * 64},
                           "sha256:" + "2" * 64, where="the local image T")
    assert why.startswith("the local image T is sha256:222222222222")


def test_pullable_by_image_id_or_by_recipe(tmp_path, monkeypatch):
    path = tmp_path / "registry.lock.json"
    registry.write_lock([entry()], path)
    monkeypatch.setenv(registrylock.LOCK_ENV, str(path))
    assert registrylock.pullable("sha256:" + "1" * 64) == REF
    assert registrylock.pullable("sha256:" + "9" * 64) is None
    assert registrylock.pullable(recipe="r" * 64) == REF
    path.write_text("not json")  # a broken lock never breaks a result
    assert registrylock.pullable("sha256:" + "1" * 64) is None


def _pair(container):
    return ({"id": "j", "status": "ok"},
            {"cell": {"framework": "mxnet"},
             "environment": {"container": container}})


def test_report_and_page_show_the_pullable_reference():
    pushed = {"runtime": "podman", "image": "dlrepro/mxnet:cpu-x",
              "image_id": "sha256:" + "1" * 64, "pullable": REF,
              "labels": {"org.dlrepro.framework": "mxnet",
                         "org.dlrepro.profile": "cpu"}}
    local = dict(pushed, runtime="docker", pullable=None)
    lines = report.image_lines([_pair(pushed), _pair(local)])
    assert lines[0] == "\nimages:"
    assert f"  mxnet/cpu (podman): {REF}" in lines
    assert ("  mxnet/cpu (docker): dlrepro/mxnet:cpu-x (sha256:11111111111"
            "1, not pushed)") in lines
    assert provenance.software([_pair(pushed)])[0]["digest"] == REF


def test_progress_in_a_log_is_a_line_per_layer_and_per_step():
    out = io.StringIO()
    shown = transfer.LineProgress("push mxnet/cpu", stream=out)
    chunks = [{"status": "The push refers to repository [x]"},
              {"id": "l1", "status": "Preparing"},
              {"id": "l1", "status": "Pushing",
               "progressDetail": {"current": 1, "total": 3000000}},
              {"id": "l1", "status": "Pushing",
               "progressDetail": {"current": 2, "total": 3000000}},
              {"id": "l1", "status": "Pushed"},
              {"id": "l2", "status": "Layer already exists"},
              {"stream": "Step 2/9 : RUN x\n"},
              {"error": "unauthorized: authentication required"}]
    errors = [transfer.follow(chunk, shown) for chunk in chunks]
    assert errors[-1] == "unauthorized: authentication required"
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("push mxnet/cpu: layer l1 pushed (3.0 MB), "
                               "1 layers done")
    assert lines[1].startswith("push mxnet/cpu: layer l2 layer already "
                               "exists, 2 layers done")
    assert lines[2] == "push mxnet/cpu: step 2/9: RUN x"
    assert len(lines) == 3
