"""What the host writes on a group worker's or fork server's standard
input: one spec path a line, as a JSON string, so that any path (a
newline, a quote in --out) is one command. A contract module: the host
writes these lines (dlrepro.run.engines.grouped), the worker reads them
(harness.worker), and neither spells the format out again."""
import json


def command_line(spec_path):
    """The line of a worker's standard input that names `spec_path`."""
    return json.dumps(spec_path) + "\n"


def spec_paths(commands, say):
    """The spec paths the lines of `commands` (a text stream) name, until
    it ends; a line that names none is answered `cell-invalid` through
    `say` (a worker's), and a blank one skipped."""
    for line in iter(commands.readline, ""):
        if not line.strip():
            continue
        try:
            spec_path = json.loads(line)
        except ValueError:
            spec_path = None
        if not isinstance(spec_path, str):
            say("cell-invalid", spec=line.rstrip("\r\n"),
                message="a worker's command is a spec path as a JSON "
                        "string, got {!r}".format(line.rstrip("\r\n")))
            continue
        yield spec_path
