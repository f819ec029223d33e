"""The host side's user error, and a run that measured nothing usable."""


class UserError(Exception):
    """Expected failure caused by input or environment; tasks turn it into a
    one-line message and exit status 2 (see tasks.py)."""


class NoUsableResult(Exception):
    """A run whose every job failed, timed out, ran out of memory or was
    unsupported: its table is printed, then tasks exit with status 1."""
