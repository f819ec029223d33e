"""What a run reports as it goes, and how Ctrl-C ends it: shared by the
pipeline and the engines, so that an engine never imports the pipeline."""


class Interrupted(Exception):
    """Ctrl-C stopped the run: the running job was stopped, run.json says
    `interrupted`, every finished result is kept."""

    def __init__(self, run_dir, kept, stopped="the running job was stopped"):
        super().__init__(f"interrupted: kept {kept} finished job(s) in "
                         f"{run_dir}")
        self.run_dir = run_dir
        self.kept = kept
        # What became of the jobs in flight (a batch engine may leave
        # them queued).
        self.stopped = stopped


class Events:
    """What a run reports as it goes; the default reports nothing."""

    def log(self, message):
        pass

    def start(self, index, total, job):
        pass

    def finish(self, index, total, job, entry):
        pass
