"""The result file: version, atomic writing, JSON conventions.

Format history:
  1  first version (see harness/result.schema.json).
"""
import json
import math
import os
import tempfile

SCHEMA_VERSION = 1
# Atomic writes go through a temp file of this prefix beside the target.
TEMP_PREFIX = ".tmp-"
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "result.schema.json")


def finite_or_none(value):
    """JSON has no NaN or infinity: a diverged loss is stored as null."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def json_safe(value):
    """NaN and infinity become null (JSON has neither), recursively."""
    if isinstance(value, float):
        return finite_or_none(value)
    if isinstance(value, dict):
        return dict((k, json_safe(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(obj):
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    return json.dumps(obj, sort_keys=True, indent=2, allow_nan=False) + "\n"


def write_atomic(path, obj):
    """Write `obj` as JSON to `path` so that readers see the old file or the
    whole new one, never a torn write (a kill mid-write keeps the old)."""
    text = dumps(obj)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def not_json(constant):
    """json's parse_constant: NaN and Infinity are no JSON, and `dumps`
    never writes them, so a file that holds one was written elsewhere."""
    raise ValueError("{} is not a JSON number (a result holds finite "
                     "numbers only)".format(constant))


def load(path):
    """Read a result file, rejecting versions this harness does not know
    and the NaN or Infinity that JSON has no place for."""
    with open(path) as handle:
        data = json.load(handle, parse_constant=not_json)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SCHEMA_VERSION:
        raise ValueError("{}: schema_version {!r} is not supported (this "
                         "harness reads version {}); rerun the cell or use a "
                         "matching release".format(path, version,
                                                   SCHEMA_VERSION))
    return data
