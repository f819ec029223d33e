"""The README's Quick start and CI's entry point must not drift apart."""
import re


def _quick_start(root):
    text = (root / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_has_exactly_two_commands(root):
    commands = _quick_start(root)
    assert len(commands) == 2
    assert commands[0].startswith("./setup.sh && .venv/bin/invoke bench")
    assert commands[1] == "bash .ci/run"


def test_ci_runs_the_test_command_the_readme_names(root):
    readme = (root / "README.md").read_text()
    command = re.search(r"the test command,\s+`([^`]+)`", readme).group(1)
    ci = (root / ".ci" / "run").read_text()
    assert command in ci.splitlines()
