"""The help of the flags of the tasks that run and read runs (bench,
converge, report, compare, export), which tasks.py hands to Invoke: pure
data, so that tasks.py stays a list of thin tasks and imports nothing
heavy to show --help. Each dict's keys are its task's flags; bench's and
converge's are the fields of BenchFlags and ConvergeFlags.
"""

SLURM = {
    "executor": "local (one job at a time on this host, the default) or slurm "
                "(job arrays; see docs/slurm.md)",
    "partition": "slurm: partition (sbatch --partition)",
    "account": "slurm: account to charge (sbatch --account)",
    "qos": "slurm: quality of service (sbatch --qos)",
    "constraint": "slurm: node features (sbatch --constraint)",
    "exclusive": "slurm: each task gets its node to itself",
    "time_limit": "slurm: --time of each task (default: the job's timeout "
                  "plus 10.5 minutes)",
    "array_throttle": "slurm: at most this many tasks at once (--array %N)",
    "mem": "slurm: memory of each task (sbatch --mem)",
    "gpu_freq": "slurm: GPU clocks Slurm sets for each task (sbatch "
                "--gpu-freq), recorded beside what telemetry saw",
    "slurm_config": "slurm: a TOML file of these options plus `sbatch = "
                    "[...]` extra arguments (a suite's [slurm] table and "
                    "flags override it)",
    "no_wait": "slurm: return once submitted; `invoke report` shows it, "
               "--resume waits for it",
}

BENCH = {
    "isolation": "cell (each cell in a process of its own) or group (cells "
                 "sharing every process-wide setting run one after another "
                 "in one harness worker) or fork (each cell in a child "
                 "forked after the framework's import, one server or "
                 "container per key; "
                 "docs/isolation.md); default: the suite's "
                 "`isolation`, else each framework's: fork for CPU "
                 "cells (Caffe's natively: group), group for "
                 "tensorflow's and caffe's GPU cells, cell otherwise",
    "framework": "framework to run (repeatable, or comma-separated)",
    "all": "run every framework in dockerfiles/matrix.toml",
    "profile": "matrix profile (default: cpu for CPU cells; for GPU cells the "
               "first profile the compatibility gate admits on the GPUs "
               "found, docs/gpu.md)",
    "suite": "suite name from benchmarks/suites or a path to a suite file "
             "(default: smoke)",
    "network": "only these networks (repeatable); networks outside the suite "
               "need --batch-size",
    "batch-size": "batch sizes to use instead of the suite's (repeatable)",
    "device": "cpu or gpu (overrides the suite)",
    "threads": "CPU thread counts instead of the suite's (repeatable)",
    "iterations": "timed iterations per cell (overrides the suite)",
    "warmup": "warm-up iterations per cell (overrides the suite)",
    "runtime": "docker (each framework in its image), podman or charliecloud "
               "(the same image, docs/runtimes.md) or native (a virtual "
               "environment per framework)",
    "out": "results root (default: results, under the working directory)",
    "resume": "continue the latest run under --out, skipping cells already "
              "done with the same definition",
    "dry-run": "print the plan and exit",
    "timeout": "seconds a cell may run before it is stopped (default: the "
               "suite's, 1800)",
    "seed": "random seed for weights and synthetic data (default 0)",
    "clock-policy": "GPU clock policy: observe, disable-boost or lock=<MHz> "
                    "(default: the suite's; the paper's GPU suites disable "
                    "boost, the paper's method)",
    "python": "native runtime: use this interpreter for every framework "
              "instead of making virtual environments",
    "registry": "docker, podman, charliecloud: pull a missing image from "
                "this HOST[:PORT]/PATH by the digest "
                "dockerfiles/registry.lock.json records, instead of "
                "building it (over DLREPRO_REGISTRY)",
    "repeat": "independent processes per cell (default: the suite's, 1); the "
              "cell's interval then spans the processes; with --isolation "
              "group, N workers per group, each taking the cells in its own "
              "order",
    **SLURM,
    "precision": "default (the framework's own, recorded as what it resolves "
                 "to), fp32 (strict: no TF32), tf32, bf16 or fp16 (mixed "
                 "precision); default: the suite's",
    "compile": "compile mode: none, or pytorch "
               "default|reduce-overhead|max-autotune, tensorflow "
               "function|xla, mxnet hybridize (default: the suite's, else "
               "each framework's own)",
}

REPORT = {
    "run": "run id or `latest` (default), under --out, or a run folder's path "
           "(with a /: ./ID); with --html repeatable (bench and convergence "
           "runs on one page; a run named twice counts once)",
    "out": "results root (default: results, under the working directory)",
    "json": "print the rows as JSON instead of a table",
    "html": "write the HTML report (figures, tables, provenance) to this file "
            "instead of printing a table",
}

COMPARE = {
    "run": "the run to look at: id or `latest` (default), under --out, or a "
           "run folder's path (with a /: ./ID)",
    "against": "a base run (id or path) to compare with, cell by cell, "
               "instead of the 2016 figures",
    "out": "results root (default: results, under the working directory)",
    "fail_slower": "with --against: exit 3 when a cell is significantly "
                   "slower by more than this percent",
    "min_change": "with --against: smallest change, in percent, called a "
                  "difference (default 5)",
}

EXPORT = {
    "run": "run id or `latest` (default), under --out, or a run folder's path "
           "(with a /: ./ID); repeatable, a run named twice counts once",
    "all": "every run under --out",
    "out": "results root (default: results, under the working directory)",
    "csv": "write the rows to this CSV file",
    "sqlite": "insert or replace the rows in this SQLite database (table "
              "cells, keyed by run_id and cell_id)",
    "db": "add the finished cells to the results database at this URL "
          "(sqlite:///FILE or a path: SQLite; postgresql://USER:PASS@HOST/DB "
          "for a team); re-exporting changes nothing",
    "machine": "with --db: the machine's name in the database (default: the "
               "host name the run recorded)",
}

CONVERGE = {
    "framework": "framework to train (repeatable)",
    "network": "fcn-r, alexnet-r, resnet-56 or lstm (repeatable)",
    "workers": "data-parallel worker counts, e.g. 1,2,4 (default)",
    "gpus": "GPU counts, e.g. 1,2,4 (implies --device gpu)",
    "epochs": "epochs per run (default: the paper's, 40 or 20)",
    "global_batch_size": "total batch over all workers (default: the paper's)",
    "data_dir": "folder that holds <dataset>/ (default: data/)",
    "synthetic": "train on synthetic data of the same shape",
    "train_samples": "use only the first N training samples",
    "test_samples": "use only the first N test samples",
    "target_loss": "training loss whose epochs/seconds to reach are compared "
                   "(default: the highest final loss)",
    "device": "cpu or gpu (default: cpu, gpu with --gpus)",
    "threads": "intra-op threads in all, shared by the workers",
    "seed": "seed of weights and sample order (default 0)",
    "out": "results root (default: results, under the working directory)",
    "timeout": "seconds per run before it is stopped",
    "runtime": "docker (each framework in its image, the default), podman, "
               "charliecloud or native",
    "resume": "continue the latest convergence run under --out, keeping runs "
              "already finished with the same spec",
    "dry_run": "print the plan and stop",
    "nodes": "Slurm nodes each run spreads its workers over (default 1; needs "
             "--executor slurm; workers is the total: --workers 2 --nodes 2 "
             "is 2 nodes x 1 worker)",
    **SLURM,
}


# The tasks' own flags beyond those above: the images' targets are
# --framework, --profile or --all (dlrepro.images.build.targets).
TARGETS = {
    "framework": "framework (repeatable)",
    "profile": "matrix profile (default: cpu; with --all: every profile)",
    "all": "every framework and profile (narrowed by --framework/--profile)",
}

ENV = {"framework": "framework whose native environment to make "
                    "(repeatable: several are made side by side)",
       "profile": "matrix profile (default: cpu)"}

HISTORY = {"db": "the results database (URL or SQLite path; default "
                 "results/history.db); only read",
           "suite": "only runs of this suite (repeatable)",
           "framework": "only this framework (repeatable)",
           "network": "only this network (repeatable)",
           "machine": "only this machine (repeatable)",
           "isolation": "only cells whose processes ran under this mode: "
                        "cell, group, fork, or several joined by + "
                        "(cell+group) (repeatable)",
           "reference": "set the 2016 reference beside as machines "
                        "(single-GPU cells; default on)",
           "html": "also write the page (cross-machine and over-time "
                   "figures) to this path"}

TEST = {"k": "only tests matching this pytest expression",
        "x": "stop at the first failure",
        "jobs": "test processes (default 2, at most the usable CPUs; "
                "1: one process)"}

OVERHEAD = {"rounds": "alternating rounds of harness and hand-written "
                      "blocks (default 10)",
            "block": "iterations per block (default 5)",
            "threads": "CPU threads (default: all usable)"}

GPU_RESTORE = {"state": "a clock-state file the harness wrote "
                        "(<cell>.clock-state.json next to the cell's result)",
               "run": "restore every outstanding clock-state file of this run: "
                      "an id or latest (the default) under --out, or a run "
                      "folder's path (with a /)",
               "out": "results root for --run (default: results)"}

DATA = {"dataset": "mnist, cifar10 or ptb",
        "data_dir": "folder that holds <dataset>/ (default: data/)",
        "mirror": "base URL to download from instead of the official ones",
        "check": "only verify the files already there; download nothing"}

RENDER = {"framework": "framework whose Dockerfile to print",
          "profile": "matrix profile (default: cpu)",
          "base_image": "FROM this image instead: REF or MATRIX_BASE=REF "
                        "(default: as DLREPRO_BASE_OVERRIDES says)",
          "index": "install from the package index (network) instead of "
                   "the wheelhouse",
          "ca_bundle": "render for a build given a CA bundle (--index)"}

BUILD = dict(TARGETS,
             base_image="FROM this image instead: REF (every target) or "
                        "MATRIX_BASE=REF (repeatable); for this command "
                        "only, over DLREPRO_BASE_OVERRIDES, which bench "
                        "reads too",
             locked="refuse a base image that `invoke lock` has not pinned",
             index="install from the package index (network) instead of "
                   "a wheelhouse",
             ca_bundle="CA bundle for pip during --index builds (not kept "
                       "in the image)",
             proxy="HTTP(S) proxy for --index builds (default: the "
                   "HTTP_PROXY/HTTPS_PROXY variables)")

CHECK_IMAGE = {"framework": "check this framework's GPU images (default: "
                            "every framework's)",
               "profile": "only this GPU profile",
               "no_build": "check only images already built"}

LOCK = {"image": "lock this image (repeatable; default: every base "
        "image of the matrix)"}

SAVE = dict(TARGETS, image="also save this image (repeatable)",
            with_base="also save each target's base image",
            base_image="as for build: which base the targets were built from",
            out="folder for the archives (default: images/)")

LOAD = {"dir": "folder written by `invoke save` (default: images/)",
        "image": "load only this reference (repeatable)"}

CH_CONVERT = dict(TARGETS,
                  source="docker (default) or podman: where the image is "
                         "built or found before conversion",
                  archive="an `invoke save` folder to load the images from "
                          "(through podman)",
                  dir="converted images folder (default: DLREPRO_CH_IMAGES, "
                      "else build/charliecloud)")

PIN = dict(TARGETS, host="regenerate requirements/host.txt from "
           "requirements/host.in instead")

PUSH = dict(TARGETS,
            registry="HOST[:PORT]/PATH to push to (credentials: `docker "
                     "login HOST`)",
            base_image="as for build: which base the targets were built "
                       "from")

PULL = dict(TARGETS,
            runtime="docker (default), podman or charliecloud: whose "
                    "store to pull into",
            registry="only references in this HOST[:PORT]/PATH "
                     "(default: the newest the lock records)",
            dir="charliecloud: converted images folder (default: "
                "DLREPRO_CH_IMAGES, else build/charliecloud)")
