"""The host side's one user-error type."""


class UserError(Exception):
    """Expected failure caused by input or environment; tasks turn it into a
    one-line message and exit status 2 (see tasks.py)."""
