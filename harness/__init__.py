"""The shared benchmark harness.

Mounted into every framework's container (down to CNTK's Python 3.6), so it
uses the standard library only; each backend imports its own framework
lazily. Nothing here imports the host package.
"""
HARNESS_VERSION = "1.0.0"
