"""The harness's one user-error type."""


class HarnessError(Exception):
    """Bad input or an impossible request: the entry point prints the
    message on one line and exits with status 2."""
