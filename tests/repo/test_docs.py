"""The documentation's shape (issue 40): a README of a page, a manual in
docs/ whose index links every page and measurement, links that resolve,
benchmarks/ holding only what docs/benchmarks.md or a task names, and no
test importing from benchmarks/."""
import re

README_MAX_LINES = 250
# A Markdown link's target, without its #fragment.
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _pages(root):
    return [root / "README.md"] + sorted((root / "docs").rglob("*.md"))


def test_the_readme_is_a_page(root):
    lines = (root / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES


def test_every_relative_link_resolves(root):
    broken = []
    for page in _pages(root):
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            if not (page.parent / target).exists():
                broken.append("{}: {}".format(page.relative_to(root), target))
    assert broken == []


def test_the_index_links_every_page_and_measurement(root):
    docs = root / "docs"
    index = (docs / "index.md").read_text()
    linked = {(docs / target).resolve() for target in LINK.findall(index)}
    pages = {p.resolve() for p in docs.glob("*.md")} - {
        (docs / "index.md").resolve()}
    measurements = {p.resolve() for p in (docs / "measurements").iterdir()}
    # A measurement folder counts as linked through its README.
    linked |= {p.parent for p in linked if p.name == "README.md"}
    unlinked = (pages | measurements) - linked
    assert sorted(str(p.relative_to(root.resolve())) for p in unlinked) == []


def test_each_benchmark_script_is_documented_or_a_task(root):
    documented = (root / "docs" / "benchmarks.md").read_text()
    tasks = (root / "tasks.py").read_text()
    scripts = sorted(p.name for p in (root / "benchmarks").glob("*.py"))
    assert scripts, "benchmarks/ has no scripts: the check would pass vacuously"
    assert [s for s in scripts if "benchmarks/" + s not in documented
            and "'{}'".format(s) not in tasks] == []


def test_no_test_imports_from_benchmarks(root):
    importing = re.compile(r"^\s*(?:from|import) benchmarks\b", re.M)
    offenders = [p.name for p in sorted((root / "tests").rglob("*.py"))
                 if importing.search(p.read_text())]
    assert offenders == []


def test_no_test_module_imports_another(root):
    """What two test modules share is a helper module of tests/ (not named
    test_*): helpers kept in a test file tie two files together, and
    tests/conftest.py groups a file by what it imports itself."""
    importing = re.compile(r"^\s*(?:from|import) test_\w+", re.M)
    offenders = [p.name for p in sorted((root / "tests").rglob("*.py"))
                 if importing.search(p.read_text())]
    assert offenders == []
