"""Kinds of job: everything in which a bench cell and a convergence run
differ, in one place.

A job names its kind (`Job.kind`, the string that run.json records); the
pipeline, the engines, collection and the run folders ask the kind, never
compare its name. A new kind of job is a `JobKind` subclass here, one line
in `KINDS`, and a planner that makes its jobs.
"""
from harness.spec import (CELL_DEFAULTS, CONVERGENCE_DEFAULTS,
                          convergence_cell)


class JobKind:
    """What the rest of dlrepro needs to know about one kind of job."""
    # run.json's `kind`, and Job.kind
    name = None
    # the harness's subcommand (`python -m harness <command>`)
    harness_command = None
    # the key under which the spec goes into the spec file
    spec_key = None
    # the `latest` pointer its runs move
    latest = None

    @property
    def task(self):
        """The Invoke task that makes such runs: named after the kind."""
        return self.name

    @property
    def label(self):
        """How a person calls such a run, in messages ("no convergence
        run ...")."""
        return self.name

    # the fields later versions added, as runs before them had them
    defaults = {}

    def with_defaults(self, spec):
        """`spec` with the fields that later versions added filled in with
        what runs before them did."""
        return dict(self.defaults, **spec)

    def expected_cell(self, spec):
        """The fields of a result's `cell` that a job of `spec` decides."""
        raise NotImplementedError

    def result_cell(self, spec):
        """The `cell` block of a result synthesized for a job that never
        reached the harness."""
        raise NotImplementedError

    def nodes(self, spec):
        """How many nodes a job of `spec` spans."""
        return 1

    def cores(self, spec, placement):
        """The cores a job asks a cluster for, or None for its default."""
        return placement.threads

    def timeout_message(self, spec, timeout_s, done):
        """Why a job stopped at its timeout, having timed `done` steps
        (None: the host does not know how many)."""
        return f"stopped at its {timeout_s} s timeout"


class BenchKind(JobKind):
    """A throughput cell: the spec is the cell itself."""
    name = "bench"
    harness_command = "run"
    spec_key = "cell"
    latest = "latest"
    # A cell written before precision and compile were fields ran the
    # frameworks' defaults, which is what those fields now say.
    defaults = CELL_DEFAULTS

    def expected_cell(self, spec):
        return self.with_defaults(spec)

    def result_cell(self, spec):
        return spec

    def timeout_message(self, spec, timeout_s, done):
        if done is None:
            # No result: its log, not the host, may say how far it got.
            return (f"cell exceeded its {timeout_s} s timeout; how many of "
                    f"its {spec['iterations']} timed iterations were done "
                    f"is not known (the harness wrote no result; see its "
                    f"log)")
        return (f"cell exceeded its {timeout_s} s timeout after {done} of "
                f"{spec['iterations']} timed iterations")


class ConvergeKind(JobKind):
    """A data-parallel convergence run, on one node or several."""
    name = "converge"
    harness_command = "converge"
    spec_key = "convergence"
    latest = "latest-converge"
    label = "convergence"
    # A spec written before nodes was a field ran on one node.
    defaults = CONVERGENCE_DEFAULTS

    def expected_cell(self, spec):
        # The harness derives the cell from the spec; the data and the
        # run's length decide the dataset label, iterations and warm-up.
        try:
            cell = convergence_cell(self.with_defaults(spec), None, 2)
        except (KeyError, TypeError, ZeroDivisionError):
            return {}
        return {k: v for k, v in cell.items()
                if k not in ("dataset", "iterations", "warmup")}

    def result_cell(self, spec):
        # No iterations ran: one, the schema's minimum.
        return convergence_cell(spec, spec["data"]["name"], 2)

    def nodes(self, spec):
        return int(spec.get("nodes", 1))

    def cores(self, spec, placement):
        if placement.threads is None and placement.device == "cpu":
            return spec["workers"]  # at least a core per worker
        return placement.threads


KINDS = {kind.name: kind for kind in (BenchKind(), ConvergeKind())}


def kind_of_spec(spec):
    """The kind of a spec read from a record that does not say (run.json
    entries carry no kind of their own, and version 0 and 1 records came
    before kinds): a cell has a batch size, a convergence spec workers."""
    if isinstance(spec, dict) and "batch_size" in spec:
        return KINDS["bench"]
    if isinstance(spec, dict) and "workers" in spec:
        return KINDS["converge"]
    return None
