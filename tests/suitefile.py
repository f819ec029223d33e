"""Suite files (benchmarks/suites/*.toml, read by dlrepro.bench.suites) as
tests write them: written once here, so that a change to the format is
one change to the tests."""
import json
from pathlib import Path


def _pairs(table):
    # JSON's strings, whole numbers and lists of them are TOML's too.
    return [f"{key} = {json.dumps(value)}" for key, value in table.items()]


def text(groups, name="test", description="", **defaults):
    """A suite's TOML: `defaults` as its [defaults], then a [[group]] for
    each dict in `groups`."""
    lines = _pairs({"name": name, "description": description})
    if defaults:
        lines += ["[defaults]"] + _pairs(defaults)
    for group in groups:
        lines += ["[[group]]"] + _pairs(group)
    return "\n".join(lines) + "\n"


def write(path, groups, **suite):
    """text(groups, **suite) written to `path`; the path as a string."""
    Path(path).write_text(text(groups, **suite))
    return str(path)
