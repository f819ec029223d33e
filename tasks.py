"""Invoke tasks: the user's entry points.

Each task reads its flags, falls back to defaults, calls the dlrepro package
and prints. dlrepro's UserError becomes a one-line message and exit status 2.

The help texts of the flags of the tasks that run and read runs are in
dlrepro/flaghelp.py; bench and converge are one call each
(dlrepro.bench.runner.bench, dlrepro.converge.runner.converge).
"""
import functools
import shlex
import signal
import sys

from invoke import Exit, task

from dlrepro import flaghelp
from dlrepro.errors import NoUsableResult, UserError

# `invoke report | head` should end quietly, as other command-line tools do.
signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def user_errors(fn):
    """Turn dlrepro's UserError into invoke's Exit (message, status 2), and
    Ctrl-C into a line saying what was kept and how to resume (status 130,
    as shells report SIGINT), and a run with no usable result into a line
    and status 1 (docs/running.md, "Exit status")."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from dlrepro.run.pipeline import Interrupted
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            raise Exit(f"error: {exc}", code=2)
        except NoUsableResult as exc:
            raise Exit(f"error: {exc}", code=1)
        except Interrupted as exc:
            raise Exit(f"{exc}; {exc.stopped}; continue with "
                       f"the same command and --resume", code=130)
        except KeyboardInterrupt:
            raise Exit("interrupted before any job ran; nothing to keep",
                       code=130)
    return wrapper


def required(value, flag):
    """Invoke takes a positional argument's `--help` as its value, so
    required values are flags with a None default, checked here."""
    if value is None:
        raise UserError(f"{flag} is required (see --help)")
    return value


def _print_lines(lines):
    for line in lines:
        print(line)


def _flags(names):
    """A task's flags by name (its `locals()`), as the dlrepro function
    it calls takes them."""
    return {k: v for k, v in names.items() if k != "c"}


@task(name="list")
@user_errors
def list_(c):
    """List frameworks and their profiles, networks, and suites."""
    from harness import networks
    from dlrepro import matrix
    from dlrepro.bench import suites
    m = matrix.load()
    print("frameworks (profiles):")
    for framework in matrix.frameworks(m):
        print(f"  {framework:<11} {', '.join(matrix.profiles(m, framework))}")
    print("networks:")
    for net in networks.NETWORKS.values():
        print(f"  {net.name:<11} {networks.parameter_count(net):>12,} params  "
              f"{net.description}")
    print("suites:")
    for name, path in suites.available().items():
        print(f"  {name:<22} {suites.load(name)['description']}")


@task(positional=[], iterable=["framework"],
      help=flaghelp.ENV)
@user_errors
def env(c, framework=None, profile="cpu"):
    """Create or refresh frameworks' native virtual environments."""
    from dlrepro import matrix
    from dlrepro.images import envs
    frameworks = framework or [required(None, "--framework")]
    m = matrix.load()
    for name in frameworks:
        reason = envs.unavailable_reason(matrix.entry(m, name, profile),
                                         name, profile)
        if reason:
            raise UserError(reason)
    made = envs.ensure_all([(name, profile) for name in frameworks], m)
    for python in made.values():
        print(python)


@task(iterable=["framework", "network", "batch_size", "threads"],
      help=flaghelp.BENCH)
@user_errors
def bench(c, framework=None, all=False, profile=None, suite="smoke",
          network=None, batch_size=None, device=None, threads=None,
          iterations=None, warmup=None, runtime="docker", out="results",
          resume=False, dry_run=False, timeout=None, seed="0",
          clock_policy=None, python=None, registry=None, repeat=None,
          precision=None, compile=None, executor="local", partition=None,
          account=None, qos=None, constraint=None, exclusive=False,
          time_limit=None, array_throttle=None, mem=None, gpu_freq=None,
          slurm_config=None, no_wait=False, isolation=None):
    """Run benchmark cells, one process each, and write results/<run_id>/."""
    flags = _flags(locals())
    from dlrepro.bench import runner
    runner.bench(runner.BenchFlags(**flags), _command())


def _command():
    return shlex.join(["invoke"] + sys.argv[1:])


@task(iterable=["run"], help=flaghelp.REPORT)
@user_errors
def report(c, run=None, out="results", json=False, html=None):
    """Summarise a finished (or interrupted) run as a table, or runs as an
    HTML page (--html PATH)."""
    import json as json_mod
    from dlrepro.bench import phases, report as report_mod
    from dlrepro.run import store
    runs = store.runs(out, run or ["latest"])
    if html:
        from dlrepro.present import page
        print(page.write(html, runs))
        return
    if len(runs) > 1:
        raise UserError("several --run need --html; the text report takes "
                        "one run")
    _folder, record, pairs = runs[0]
    rows = report_mod.summary_rows(pairs)
    if json:
        print(json_mod.dumps([dict(zip(report_mod.COLUMNS, r)) for r in rows],
                             indent=2))
        return
    print(f"{record['run_id']}  {record['command']}  ({record['status']})")
    _print_lines(report_mod.format_table(rows))
    _print_lines(report_mod.side_by_side_lines(pairs))
    _print_lines(report_mod.image_lines(pairs))
    _print_lines(phases.summary_lines(pairs, record))
    if record.get("executor") == "slurm":
        from dlrepro.run.engines import slurm
        line = slurm.live_line(record)
        if line:
            print(line)


@task(help=flaghelp.COMPARE)
@user_errors
def compare(c, run="latest", against=None, out="results", fail_slower=None,
            min_change="5"):
    """Compare a run with another run, or with the 2016 figures."""
    from dlrepro import parse
    from dlrepro.bench import compare as compare_mod, versus
    # Every flag and run is checked before any line of a table is printed.
    change = parse.number(min_change, "--min-change")
    limit = (None if fail_slower is None
             else parse.number(fail_slower, "--fail-slower"))
    if against is None and limit is not None:
        raise UserError("--fail-slower needs --against (a base run)")
    record, pairs = versus.load_bench_run(out, run)
    if against is None:
        _print_lines(compare_mod.format_rows(
            compare_mod.rows(pairs, compare_mod.load_reference())
            + compare_mod.no_reference_rows(pairs)))
        return
    base_record, base = versus.load_bench_run(out, against, "base run")
    from dlrepro.run import groups
    modes = (groups.measured_modes(base_record, base),
             groups.measured_modes(record, pairs))
    _print_lines(filter(None, [groups.compare_line(*modes)]
                        + versus.note_lines(base, pairs)))
    rows, unmatched = versus.compare_runs(base, pairs,
                                          min_change=change / 100)
    _print_lines(versus.format_rows(rows, unmatched))
    if limit is not None:
        slower = versus.slowdowns(rows, limit / 100)
        if slower:
            raise Exit(f"{len(slower)} cell(s) significantly slower by more "
                       f"than {limit:g}%", code=3)


@task(iterable=["run"], help=flaghelp.EXPORT)
@user_errors
def export(c, run=None, all=False, out="results", csv=None, sqlite=None,
           db=None, machine=None):
    """Export runs as one row per cell (identity and statistics)."""
    from dlrepro.bench import export as export_mod
    from dlrepro.run import store
    if not csv and not sqlite and not db:
        raise UserError("give --csv FILE, --sqlite FILE, --db URL or several")
    if db:
        from dlrepro.history import db as history_db
        history_db.check_machine(machine)
    runs = store.runs(out, run or ["latest"], all)
    rows = [row for r in runs for row in export_mod.rows(r.record, r.jobs)]
    if csv:
        export_mod.write_csv(csv, rows)
    if sqlite:
        export_mod.write_sqlite(sqlite, rows)
    if csv or sqlite:
        print(f"{len(rows)} cells exported")
    if db:
        from dlrepro.history import report as history_report
        _print_lines(history_report.export_lines(db, runs, machine))


@task(iterable=["suite", "framework", "network", "machine", "isolation"],
      help=flaghelp.HISTORY)
@user_errors
def history(c, db="results/history.db", suite=None, framework=None,
            network=None, machine=None, isolation=None, reference=True,
            html=None):
    """The results database: the same cells across machines, and each
    cell's history with the steps found in it."""
    from dlrepro.history import report as history_report
    filters = {"suite": suite or [], "framework": framework or [],
               "network": network or [], "machine": machine or [],
               "isolation": isolation or []}
    for line in history_report.run(db, filters, reference, html):
        print(line)


@task(help=flaghelp.TEST)
@user_errors
def test(c, k="", x=False, jobs=None):
    """Run the test suite (pytest; test files spread over `jobs` processes,
    tests/conftest.py says which must share one)."""
    from dlrepro import hostinfo, parse
    jobs = min(parse.count(2 if jobs is None else jobs, "--jobs"),
               hostinfo.usable_cpus())
    args = [sys.executable, "-m", "pytest", "tests"]
    if jobs > 1:
        args += ["-n", str(jobs), "--dist", "loadfile"]
    if k:
        args += ["-k", shlex.quote(k)]
    if x:
        args.append("-x")
    c.run(" ".join(args), pty=False)


@task(help=flaghelp.OVERHEAD)
@user_errors
def overhead(c, rounds=None, block=None, threads=None):
    """Measure the harness's overhead against a hand-written PyTorch loop."""
    from dlrepro import ROOT, hostinfo, matrix, parse
    from dlrepro.images import envs
    # None defaults: Invoke parses an int default itself, "abc" a traceback.
    rounds = parse.count(10 if rounds is None else rounds, "--rounds")
    block = parse.count(5 if block is None else block, "--block")
    threads = parse.count(threads or hostinfo.usable_cpus(), "--threads")
    python = envs.ensure("pytorch", "cpu", matrix.load()["pytorch"]["cpu"])
    c.run(f"{python} {ROOT / 'benchmarks' / 'harness_overhead.py'} "
          f"--rounds {rounds} --block {block} --threads {threads}",
          env={"PYTHONPATH": str(ROOT)}, pty=False)


# --- GPU clocks ----------------------------------------------------------------

@task(help=flaghelp.GPU_RESTORE)
@user_errors
def gpu_restore(c, state=None, run=None, out="results"):
    """Restore GPU clocks that a killed cell left changed (needs root)."""
    from dlrepro.run import gpu_restore as restore_mod
    for line in restore_mod.restore(state=state, run=run, out=out):
        print(line)


# --- data and convergence ------------------------------------------------------
# Thin tasks over dlrepro.converge.datasets and dlrepro.converge.runner; see docs/convergence.md.

@task(auto_shortflags=False, positional=[],
      help=flaghelp.DATA)
@user_errors
def data(c, dataset=None, data_dir=None, mirror=None, check=False):
    """Download a dataset's official files (verified), or check them."""
    dataset = required(dataset, "--dataset")
    from dlrepro.converge import datasets
    folder = data_dir or datasets.DEFAULT_DATA_DIR
    if not check:
        datasets.download(dataset, folder, mirror=mirror,
                          progress=datasets.ProgressPrinter(
                              sys.stderr, sys.stderr.isatty()))
    lines = datasets.status(dataset, folder)
    print("\n".join(lines))
    if check and not lines[-1].startswith(f"{dataset}: {dataset} sha256:"):
        raise UserError(lines[-1])


@task(iterable=["framework", "network"], auto_shortflags=False,
      help=flaghelp.CONVERGE)
@user_errors
def converge(c, framework=None, network=None, workers=None, gpus=None,
             nodes=None,
             epochs=None, global_batch_size=None, data_dir=None,
             synthetic=False, train_samples=None, test_samples=None,
             target_loss=None, device=None, threads=None, seed="0",
             out="results", timeout=None, runtime="docker", resume=False,
             dry_run=False,
             executor="local", partition=None, account=None, qos=None,
             constraint=None, exclusive=False, time_limit=None,
             array_throttle=None, mem=None, gpu_freq=None, slurm_config=None,
             no_wait=False):
    """Convergence with data parallelism: loss curves for 1/2/4 workers."""
    flags = _flags(locals())
    from dlrepro.converge import runner
    runner.converge(runner.ConvergeFlags(**flags), _command())


# --- images: dlrepro.images -----------------------------------------------------
# Targets: --framework NAME (its cpu profile unless --profile), or --all
# (every framework and profile, narrowed by --framework/--profile).



@task(positional=[],
      help=flaghelp.RENDER)
@user_errors
def render(c, framework=None, profile="cpu", base_image="", index=False,
           ca_bundle=False):
    """Print the Dockerfile of a framework image (same inputs, same bytes)."""
    from dlrepro.images import commands
    print(commands.dockerfile(required(framework, "--framework"), profile,
                              base_image, index, ca_bundle), end="")

@task(iterable=["framework", "base_image"],
      help=flaghelp.BUILD)
@user_errors
def build(c, framework=None, profile="", all=False, base_image=None,
          locked=False, index=False, ca_bundle="", proxy=""):
    """Build framework images (a no-op when the image is up to date).

    The tag derives from the recipe's hash, so an unchanged image is not
    rebuilt; the wheelhouse is downloaded first when missing."""
    from dlrepro.images import commands, transfer
    transfer.allow_live()
    note = commands.build(framework, profile, all, base_image, locked, index,
                          ca_bundle, proxy)
    if note:
        print(note, file=sys.stderr)

@task(help=flaghelp.CHECK_IMAGE)
@user_errors
def check_image(c, framework=None, profile="", no_build=False):
    """Check GPU images without a GPU: imports, versions, CUDA libraries
    and kernel architectures against the matrix (docs/images.md).

    Builds a missing image first (several GB and minutes each): run it
    outside the per-commit CI. Exits 1 when an image and the matrix
    disagree, or when an image was not checked (missing, not built)."""
    from dlrepro.images import commands
    reports, lines, unchecked = commands.check_images(
        framework, profile, build_missing=not no_build)
    _print_lines(lines)
    from dlrepro.images import gpucheck
    if any(gpucheck.differences(r) for r in reports):
        raise Exit("an image disagrees with dockerfiles/matrix.toml (above)",
                   code=1)
    if unchecked:
        raise Exit(f"{len(unchecked)} of {len(unchecked) + len(reports)} "
                   f"image(s) not checked ({', '.join(unchecked)}): see "
                   "above", code=1)


@task(iterable=["framework"], help=flaghelp.TARGETS)
@user_errors
def wheelhouse(c, framework=None, profile="", all=False):
    """Download the locked wheels into wheelhouse/ for offline builds.

    Exactly the files of the lock (and the matrix's `sources`), every
    sha256 checked."""
    from dlrepro import matrix
    from dlrepro.images import build as images
    from dlrepro.images import transfer, wheelhouse as wheelhouse_mod
    transfer.allow_live()
    m = matrix.load()
    for fw, prof in images.targets(m, framework, profile or None, all):
        print(wheelhouse_mod.make(fw, prof, m[fw][prof]))


@task(iterable=["image"],
      help=flaghelp.LOCK)
@user_errors
def lock(c, image=None):
    """Pin base images in dockerfiles/base-images.lock.

    Resolves each to its registry digest (or, for a local-only image, its
    image ID); builds use the pins and --locked requires them."""
    from dlrepro import matrix
    from dlrepro.images import build as images
    names = image or images.matrix_bases(matrix.load())
    failures = images.lock_bases(names)
    if failures:
        raise UserError(f"{len(failures)} of {len(names)} base images not "
                        f"locked: {', '.join(sorted(failures))}")


@task(iterable=["framework", "image", "base_image"],
      help=flaghelp.SAVE)
@user_errors
def save(c, framework=None, profile="", all=False, image=None,
         with_base=False, base_image=None, out="images"):
    """Archive built images with their checksums (docker save).

    Writes one tar per image, SHA256SUMS and images.json: upstream base
    tags get deleted, an archive keeps the exact image."""
    from dlrepro.images import archive, commands
    archive.save(commands.refs_to_save(framework, profile, all, image,
                                       with_base, base_image), out)

@task(iterable=["image"],
      help=flaghelp.LOAD)
@user_errors
def load(c, dir="images", image=None):
    """Load archived images after checking their SHA256SUMS and IDs."""
    from dlrepro.images import archive
    archive.load(dir, image or None)


@task(iterable=["framework"],
      help=flaghelp.CH_CONVERT)
@user_errors
def ch_convert(c, framework=None, profile="", all=False, source="docker",
               archive=None, dir=None):
    """Convert images for --runtime charliecloud (ch-convert to a directory).

    Builds or loads each target's image as bench would, then converts it
    into the shared images folder, once per image ID."""
    from dlrepro import matrix
    from dlrepro.images import build as images, charliecloud
    m = matrix.load()
    for fw, prof in images.targets(m, framework, profile or None, all):
        print(charliecloud.convert_target(fw, prof, m, source=source,
                                          archive_dir=archive,
                                          folder=dir)["path"])


@task(iterable=["framework"],
      help=flaghelp.PIN)
@user_errors
def pin(c, framework=None, profile="", all=False, host=False):
    """Regenerate hash-pinned lock files with pip.

    dockerfiles/requirements/<framework>-<profile>.txt from the matrix's
    `pip`, or with --host requirements/host.txt from requirements/host.in."""
    from dlrepro.images import commands
    _print_lines(commands.pin(framework, profile, all, host))


@task(iterable=["framework", "base_image"],
      help=flaghelp.PUSH)
@user_errors
def push(c, framework=None, profile="", all=False, registry=None,
         base_image=None):
    """Push built images to a registry and record their digests.

    Each image's pullable reference (REGISTRY/PATH/framework@sha256:...)
    goes into dockerfiles/registry.lock.json beside its recipe hash, once
    its push has finished (docs/images.md, "Sharing images")."""
    from dlrepro import matrix
    from dlrepro.images import build as images, registry as registry_mod
    from dlrepro.images import transfer
    transfer.allow_live()
    m = matrix.load()
    pairs = images.targets(m, framework, profile or None, all)
    images.check_overrides(m, pairs, base_image or [])
    registry_mod.push(pairs, m, required(registry, "--registry"),
                      subst=images.substitution(base_image or []))


@task(iterable=["framework"],
      help=flaghelp.PULL)
@user_errors
def pull(c, framework=None, profile="", all=False, runtime="docker",
         registry=None, dir=None):
    """Pull images by the digests dockerfiles/registry.lock.json records.

    Checks each image's recipe label (and ID) against the lock before
    tagging it as `invoke build` would: an image that differs is refused."""
    from dlrepro import matrix
    from dlrepro.images import build as images, pulls, transfer
    transfer.allow_live()
    m = matrix.load()
    pairs = images.targets(m, framework, profile or None, all)
    for fw, prof, where in pulls.pull(pairs, m, runtime,
                                      registry_name=registry, folder=dir):
        print(f"{fw}/{prof}: {where}")
