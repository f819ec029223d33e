"""A results root whose path a line protocol could not carry (issue 42 item
14), on the real command line with tests/bin/scripted-python as the
interpreter: the host names each cell's spec to its worker (`group`) or
fork server (`fork`) as one JSON string a line, so a newline, a quote or
a backslash in --out is a path like any other, and each cell ends in its
own result."""
import json

import pytest

from harness import worker
from groupcells import NETWORKS, result, statuses
from scripted import BENCH, invoke

# A newline (which split the old protocol's line in two), a quote and a
# backslash (which JSON escapes), a line that looks like a protocol word.
ODD = 'new\nline "quoted" back\\slash\ncell-done {}'


@pytest.mark.parametrize("isolation", ["group", "fork"])
def test_an_out_with_a_newline_runs_every_cell_in_its_worker(tmp_path,
                                                             isolation):
    """Fault: every cell `error`, and one cell's error named another
    cell's spec (the worker read each half of a path as a spec)."""
    out = tmp_path / ODD
    networks = [a for n in NETWORKS for a in ("--network", n)]
    proc = invoke(*BENCH, "--out", str(out), "--isolation", isolation,
                  *networks)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = (out / "latest").resolve()
    assert statuses(run_dir) == {n: "ok" for n in NETWORKS}
    for network in NETWORKS:
        found = result(run_dir, network)
        assert found["cell"]["network"] == network
        assert found["isolation"]["mode"] == isolation
        assert found["isolation"]["position"] == NETWORKS.index(network) + 1


def test_a_command_that_names_no_path_is_answered_cell_invalid():
    """One answer a line, whatever the line: the host reads exactly one
    `cell-invalid` for a command it could not have meant."""
    said = []
    commands = iter([worker.command_line("a\nb"), "\n", "not json\n",
                     "42\n", ""])
    paths = list(worker.spec_paths(
        type("Stream", (), {"readline": lambda self: next(commands)})(),
        lambda word, **fields: said.append((word, fields))))
    assert paths == ["a\nb"]
    assert [word for word, _ in said] == ["cell-invalid"] * 2
    assert [fields["spec"] for _, fields in said] == ["not json", "42"]
    assert json.loads(worker.command_line('"\\')) == '"\\'
