"""The host side's user error, and a run that measured nothing usable."""


class UserError(Exception):
    """Expected failure caused by input or environment; tasks turn it into a
    one-line message and exit status 2 (see tasks.py)."""


class NoUsableResult(Exception):
    """A run whose every job failed, timed out, ran out of memory or was
    unsupported: its table is printed, then tasks exit with status 1."""


def read_text(path, what=None):
    """The text of the file at `path`; UserError `cannot read WHAT: why`
    when it cannot be read (`what`: how the message names it, by default
    the path)."""
    try:
        return path.read_text()
    except OSError as exc:
        raise UserError(f"cannot read {what or path}: {exc.strerror or exc}")
