"""From `invoke converge`'s flags to the jobs of a convergence run: one
per (framework, network, worker count), every field checked before
anything starts, and the data verified once."""
from pathlib import Path

from harness.data import datasets as hd
from harness.errors import HarnessError
from harness.spec import MAX_SEED, check_batch, check_split

from dlrepro import matrix as matrix_mod, parse
from dlrepro.converge.datasets import DEFAULT_DATA_DIR
from dlrepro.errors import UserError
from dlrepro.run.job import Job, Placement
from dlrepro.run.runtimes import RUNTIMES

NETWORKS = tuple(sorted(hd.NETWORK_DATASETS))
# Shi et al. 2016, section 4: epochs of the real-data runs, and the global
# batch (total over workers) of its multi-GPU runs and its CPU runs. The
# paper lists no multi-GPU batch for the LSTM; its single-GPU 128 stands in.
PAPER_EPOCHS = {"fcn-r": 40, "alexnet-r": 40, "resnet-56": 40, "lstm": 20}
PAPER_GLOBAL_BATCH = {
    "gpu": {"fcn-r": 4096, "alexnet-r": 1024, "resnet-56": 128, "lstm": 128},
    "cpu": {"fcn-r": 1024, "alexnet-r": 1024, "resnet-56": 128, "lstm": 128},
}
DEFAULT_TIMEOUT_S = 6 * 3600


def worker_counts(text, flag):
    """"1,2,4" -> (1, 2, 4), sorted, without repeats."""
    return tuple(sorted(parse.counts(text, flag)))


def plan(frameworks, networks, workers, *, device="cpu", global_batch=None,
         epochs=None, seed=0, threads=None, data_dir=None, synthetic=False,
         train_samples=None, test_samples=None, target_loss=None,
         checksums=None, profile=None, matrix=None, runtime="docker",
         clock_policy="observe", timeout=None, nodes=1, executor="local"):
    """The jobs of a convergence run, in order; raises UserError for
    anything the harness would reject. `nodes` > 1 spreads each job's
    workers over that many Slurm nodes (workers is the total)."""
    matrix = matrix if matrix is not None else matrix_mod.load()
    _check_choices(matrix, frameworks, networks, device, runtime)
    nodes = check_nodes(nodes, workers, runtime, executor)
    seed = parse.count(0 if seed is None else seed, "--seed", minimum=0,
                       maximum=MAX_SEED)
    threads = parse.optional_count(threads, "--threads")
    limits = {"train_samples": parse.optional_count(train_samples,
                                                    "--train-samples"),
              "test_samples": parse.optional_count(test_samples,
                                                   "--test-samples")}
    if target_loss is not None:
        target_loss = parse.number(target_loss, "--target-loss")
    timeout_s = parse.optional_count(timeout, "--timeout") or DEFAULT_TIMEOUT_S
    if synthetic and (data_dir is not None or checksums is not None):
        raise UserError("--synthetic and --data-dir exclude each other")
    jobs = []
    for network in networks:
        batch = parse.optional_count(global_batch, "--global-batch-size") or \
            PAPER_GLOBAL_BATCH[device][network]
        run_epochs = parse.optional_count(epochs, "--epochs") or \
            PAPER_EPOCHS[network]
        data = _data_spec(network, data_dir, synthetic, checksums, limits)
        check_full_batch(batch, data)
        for count in workers:
            try:
                check_split(batch, count)
                for framework in frameworks:
                    check_batch(batch // count, framework, network,
                                "a worker's batch")
            except HarnessError as exc:
                raise UserError(str(exc))
        for framework in frameworks:
            profile_name = profile or matrix_mod.default_profile(
                matrix, framework, device)
            matrix_mod.entry(matrix, framework, profile_name)
            for count in workers:
                spec = {
                    "framework": framework, "profile": profile_name,
                    "network": network, "device": device, "workers": count,
                    "global_batch_size": batch, "epochs": run_epochs,
                    "seed": seed, "threads": threads, "runtime": runtime,
                    "clock_policy": clock_policy, "data": data,
                    "target_loss": target_loss,
                }
                if nodes > 1:
                    # Absent means 1: specs of older runs stay equal.
                    spec["nodes"] = nodes
                jobs.append(job_for(spec, timeout_s))
    return jobs


def check_full_batch(batch, data):
    """Training drops the incomplete last batch: a global batch larger than
    the training samples leaves no batch at all."""
    known = [n for n in (data.get("train_samples"),
                         hd.DATASETS[data["name"]].train_count)
             if n is not None]
    if known and batch > min(known):
        raise UserError(f"a global batch of {batch} samples is larger than "
                        f"the {min(known)} training samples of "
                        f"{data['name']}: not one batch to train on")


def check_nodes(nodes, workers, runtime, executor):
    """--nodes as a count; more than one only under Slurm, never with the
    docker runtime, and dividing every worker count."""
    nodes = parse.count(1 if nodes is None else nodes, "--nodes")
    if nodes == 1:
        return nodes
    if executor != "slurm":
        raise UserError(f"--nodes {nodes} needs --executor slurm (the "
                        f"local executor runs on this host only); nothing "
                        f"was run")
    if runtime == "docker":
        raise UserError(f"--nodes {nodes} cannot use the docker runtime: its "
                        f"containers live in the Docker daemon's network "
                        f"namespace, not the Slurm node's, so nodes could "
                        f"not reach each other; use native, podman or "
                        f"charliecloud (docs/multinode.md)")
    for count in workers:
        if count % nodes:
            raise UserError(f"--workers {count} is not a multiple of "
                            f"--nodes {nodes} (workers is the total over "
                            f"the nodes)")
    return nodes


def _check_choices(matrix, frameworks, networks, device, runtime):
    if not frameworks:
        raise UserError("name at least one --framework")
    for framework in frameworks:
        matrix_mod.profiles(matrix, framework)
    if not networks:
        raise UserError(f"name at least one --network: {', '.join(NETWORKS)}")
    for network in networks:
        if network not in NETWORKS:
            raise UserError(f"unknown convergence network {network!r}; valid "
                            f"networks: {', '.join(NETWORKS)}")
    if device not in ("cpu", "gpu"):
        raise UserError(f"--device must be cpu or gpu, got {device!r}")
    if runtime not in RUNTIMES:
        raise UserError(f"unknown runtime {runtime!r}; valid runtimes: "
                        f"{', '.join(sorted(RUNTIMES))}")


def job_for(spec, timeout_s):
    data_dir = spec["data"].get("dir")
    return Job(id=run_name(spec), kind="converge", spec=spec,
               timeout_s=timeout_s,
               placement=Placement(
                   spec["framework"], spec["profile"], spec["device"],
                   spec["threads"],
                   spec["workers"] if spec["device"] == "gpu" else 0,
                   spec["clock_policy"]),
               mounts=(data_dir,) if data_dir else ())


def run_name(spec):
    name = f"{spec['framework']}-{spec['network']}-w{spec['workers']}"
    if spec.get("nodes", 1) > 1:
        name += f"-n{spec['nodes']}"  # 1x2 and 2x1 are different cells
    return name


def _data_spec(network, data_dir, synthetic, checksums, limits):
    name = hd.for_network(network)
    if synthetic:
        return dict(source="synthetic", name=name, **limits)
    folder = Path(data_dir) if data_dir is not None else DEFAULT_DATA_DIR
    return dict(source="files", name=name, dir=str(folder.resolve()),
                checksums=checksums, **limits)


def check_data(jobs, log=print):
    """Verify every dataset the jobs read, once each, before any starts (a
    missing folder or a corrupt file is a UserError naming it)."""
    seen = set()
    for job in jobs:
        data = job.spec["data"]
        key = (data["name"], data.get("dir"))
        if data["source"] != "files" or key in seen:
            continue
        seen.add(key)
        try:
            _layout, _contents, records = hd.read_verified(
                data["name"], data["dir"], data.get("checksums"))
        except HarnessError as exc:
            raise UserError(str(exc))
        log(f"{hd.label(data['name'], records, data.get('checksums') is not None)}"
            f" verified in {data['dir']}")
