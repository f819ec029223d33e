"""The six backends keep one contract (harness/frameworks/__init__.py's
docstring): every backend module and every parallel module defines the
contract's names with the contract's signatures, and a public helper that
two backends share has one signature in both. Read with `ast`, so it runs
without any framework installed; a framework's public names include those
its backend re-exports from the modules beside it (layers.py, step.py)."""
import ast
from pathlib import Path

import pytest

from harness import frameworks

FOLDER = Path(frameworks.__file__).parent
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# name -> its signature as signature() renders it.
BACKEND_FUNCTIONS = {
    "versions": "device",
    "configure": "threads, device, seed",
    "effective_threads": "",
    "gpu_count": "",
    "is_out_of_memory": "exc",
    "math_mode": "device",
    "prepare": "network, batch_size, device, seed, batch=None, "
               "precision='default', compile_mode=None",
    "build_model": "network, batch_size, device, seed",
    "batch_arrays": "network, batch_size, device, seed, batch=None",
    "count_parameters": "model",
    "release_memory": "device, collect",
}
BACKEND_CONSTANTS = {"NAME": None, "DEVICES": None,
                     "CAPABILITIES": "capabilities"}
SESSION_METHODS = ("step", "output_shape")
PARALLEL_FUNCTIONS = {"gpu_count": "", "train": "plan, data, log"}
PARALLEL_CONSTANTS = {"NAME": None, "DEVICES": None, "MECHANISM": None,
                      "CAPABILITIES": "parallel_capabilities"}


def signature(function):
    """A def's parameters as written: names and default values."""
    args = function.args
    plain = args.posonlyargs + args.args
    defaults = [None] * (len(plain) - len(args.defaults)) + args.defaults
    parts = [a.arg if d is None else "{}={}".format(a.arg, ast.unparse(d))
             for a, d in zip(plain, defaults)]
    if args.vararg:
        parts.append("*" + args.vararg.arg)
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        parts.append(a.arg if d is None else "{}={}".format(
            a.arg, ast.unparse(d)))
    if args.kwarg:
        parts.append("**" + args.kwarg.arg)
    return ", ".join(parts)


def public_names(framework, module, seen=None):
    """{name: its ast node} of `module` in the framework's folder: its own
    top-level definitions and what it imports from the modules beside it
    (one name, one node, wherever it is defined)."""
    seen = seen or set()
    seen.add(module)
    tree = ast.parse((FOLDER / framework / (module + ".py")).read_text())
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and \
                node.module and node.module not in seen:
            beside = public_names(framework, node.module, seen)
            for alias in node.names:
                if alias.name in beside:
                    names[alias.asname or alias.name] = beside[alias.name]
    return {n: node for n, node in names.items() if not n.startswith("_")}


def contract_problems(names, functions, constants):
    """What `names` (one module's public_names) lacks or has otherwise
    than the contract's `functions` and `constants`."""
    problems = []
    for name, expected in sorted(functions.items()):
        node = names.get(name)
        if not isinstance(node, ast.FunctionDef):
            problems.append("no function {}".format(name))
        elif signature(node) != expected:
            problems.append("{}({}), the contract says {}({})".format(
                name, signature(node), name, expected))
    for name, factory in sorted(constants.items()):
        node = names.get(name)
        if not isinstance(node, ast.Assign):
            problems.append("no {}".format(name))
        elif factory is not None and not (
                isinstance(node.value, ast.Call) and
                ast.unparse(node.value.func).endswith(factory)):
            problems.append("{} is not made by backends.{}".format(name,
                                                                    factory))
    return problems


def session_problems(names):
    session = names.get("Session")
    if not isinstance(session, ast.ClassDef):
        return ["no class Session"]
    problems = []
    if [ast.unparse(b) for b in session.bases] != ["backends.Session"]:
        problems.append("Session does not derive from backends.Session")
    methods = {n.name: n for n in session.body
               if isinstance(n, ast.FunctionDef)}
    for method in SESSION_METHODS:
        if method not in methods or signature(methods[method]) != "self":
            problems.append("no Session.{}(self)".format(method))
    return problems


def shared_helper_problems(part):
    """Public functions two frameworks' `part` modules both define with
    different signatures."""
    seen = {}
    for framework in frameworks.NAMES:
        for name, node in public_names(framework, part).items():
            if isinstance(node, ast.FunctionDef):
                seen.setdefault(name, {})[framework] = signature(node)
    return ["{}: {}".format(name, by_framework)
            for name, by_framework in sorted(seen.items())
            if len(set(by_framework.values())) > 1]


@pytest.mark.parametrize("framework", frameworks.NAMES)
def test_the_backend_keeps_the_contract(framework):
    names = public_names(framework, "backend")
    assert contract_problems(names, BACKEND_FUNCTIONS,
                             BACKEND_CONSTANTS) + session_problems(names) == []


@pytest.mark.parametrize("framework", frameworks.NAMES)
def test_the_parallel_module_keeps_the_contract(framework):
    assert contract_problems(public_names(framework, "parallel"),
                             PARALLEL_FUNCTIONS, PARALLEL_CONSTANTS) == []


@pytest.mark.parametrize("part", frameworks.PARTS)
def test_a_helper_two_backends_share_has_one_signature(part):
    assert shared_helper_problems(part) == []


def test_a_differing_signature_is_found():
    """The checks above see what they check: a backend whose loss takes
    (labels, logits) against another's (logits, labels)."""
    one = ast.parse("def loss(logits, labels): pass").body[0]
    other = ast.parse("def loss(labels, logits): pass").body[0]
    assert signature(one) != signature(other)
    names = {"loss": other}
    assert contract_problems(names, {"loss": "logits, labels"}, {}) == [
        "loss(labels, logits), the contract says loss(logits, labels)"]


def long_functions(path):
    """Functions over MAX_FUNCTION_LINES lines without their reason at
    their top (a docstring or comment that says why they are long)."""
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if node.end_lineno - node.lineno + 1 <= MAX_FUNCTION_LINES:
            continue
        top = "\n".join(lines[node.lineno - 1:node.body[0].end_lineno + 2])
        if "long" not in top.lower():
            found.append("{}:{} {}".format(path.name, node.lineno, node.name))
    return found


def framework_modules():
    return sorted(FOLDER.glob("**/*.py"))


def test_no_framework_module_is_over_500_lines():
    assert [str(p.relative_to(FOLDER)) for p in framework_modules()
            if len(p.read_text().splitlines()) > MAX_MODULE_LINES] == []


def test_a_long_function_says_why_at_its_top():
    assert [f for p in framework_modules() for f in long_functions(p)] == []
