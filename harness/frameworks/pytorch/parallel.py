"""PyTorch data parallelism: DistributedDataParallel with one process per
worker, launched with torchrun (`python -m torch.distributed.run
--standalone`); gloo on the CPU, NCCL on GPUs.

`train` runs in the convergence process and starts torchrun; torchrun starts
`python -m harness.frameworks.pytorch.parallel --plan PLAN --out CURVES` once per
worker. Every worker builds the model with the PyTorch backend's
build_model from the same seed (DDP also broadcasts rank 0's weights),
trains on its part of each global batch, and DDP averages the gradients
over the workers during backward, i.e. over the global batch.

Across nodes (docs/multinode.md) every node runs torchrun with --nnodes N
--node_rank r --nproc_per_node M and a static rendezvous on the
coordinator (--master_addr/--master_port: node 0's torchrun holds the
TCPStore that every worker's process group meets in); gloo (NCCL on GPUs)
connects over the cluster's interface. The cluster's timeout_s bounds the
rendezvous (the store waits that long for the other nodes' agents) and
every collective (init_process_group's timeout), so a node that never
comes or dies ends the run with an error, not a hang. Each node's local
rank 0 writes its node's curves (the global losses, the same everywhere).

Run as:
    python -m harness.frameworks.pytorch.parallel --plan PLAN.json --out CURVES.json
(under torchrun only).
"""
import collections
import datetime
import math
import os
import subprocess
import sys
import threading

from ...errors import device_out_of_memory
from .. import arrays, backends, children, dataparallel
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

MECHANISM = {
    "cpu": "DistributedDataParallel, gloo, one process per worker "
           "(torchrun --standalone)",
    "gpu": "DistributedDataParallel, NCCL, one process per GPU "
           "(torchrun --standalone)",
}
_MULTI_NODE = True
_TRANSPORT = {
    "cpu": "gloo (TCP) over {interface}; static rendezvous (torchrun's "
           "TCPStore on the coordinator)",
    "gpu": "NCCL over {interface} (sockets, or InfiniBand where NCCL finds "
           "it); static rendezvous (torchrun's TCPStore on the coordinator)",
}
CAPABILITIES = backends.parallel_capabilities(
    process_per_worker=True,
    multi_node=_MULTI_NODE,
    transport=_TRANSPORT)
_MODULE = "harness.frameworks.pytorch.parallel"


# --- the convergence process: start torchrun -----------------------------------

def _pump(stream, sink, tail):
    # Forward the workers' stderr to the cell's log, keeping the last lines
    # for the error message.
    for line in iter(stream.readline, ""):
        sink.write(line)
        sink.flush()
        tail.append(line.rstrip())
    stream.close()


def train(plan, data, log):
    """Run this node's workers under torchrun and return the curves of its
    first worker (rank 0's on one node)."""
    cluster = plan.get("cluster")
    if plan.get("nodes", 1) > 1:
        command, rendezvous = _multi_node(plan, cluster)
    else:
        command, rendezvous = [
            sys.executable, "-m", "torch.distributed.run",
            "--standalone", "--local-addr", "127.0.0.1",
            "--nnodes", "1",
            "--nproc_per_node", str(plan["workers"]),
            "-m", _MODULE], None

    def run(command, env):
        _torchrun(command, env, cluster, plan["device"], rendezvous)
    return dataparallel.launch(plan, log, command, run,
                               prefix="dlrepro-ddp-")


def _multi_node(plan, cluster):
    """torchrun's command line for this node, and the rendezvous it names
    in errors."""
    rank = cluster["node_rank"]
    rendezvous = ("static rendezvous at {}:{} (node {} of {}, {:g} s "
                  "timeout)".format(cluster["coordinator"], cluster["port"],
                                    rank, plan["nodes"], cluster["timeout_s"]))
    command = [sys.executable, "-m", "torch.distributed.run",
               "--nnodes", str(plan["nodes"]), "--node_rank", str(rank),
               "--nproc_per_node", str(plan["workers_per_node"]),
               "--master_addr", cluster["coordinator"],
               "--master_port", str(cluster["port"]),
               "--local-addr", cluster["addresses"][rank],
               # The store's wait for the other nodes (static rendezvous
               # reads `timeout`; default 600 s).
               "--rdzv_conf", "timeout={}".format(
                   int(math.ceil(cluster["timeout_s"]))),
               "-m", _MODULE]
    return command, rendezvous


def _torchrun(command, env, cluster, device, rendezvous):
    env["PYTHONUNBUFFERED"] = "1"
    if cluster is not None and cluster["interface"]:
        # The interface that holds this node's address: gloo and NCCL
        # otherwise pick one from the hostname, which may be another
        # network's (or none, in a container).
        env["GLOO_SOCKET_IFNAME"] = cluster["interface"]
        if device == "gpu":
            env.setdefault("NCCL_SOCKET_IFNAME", cluster["interface"])
    # torchrun would set 1 thread per worker and warn; the plan decides
    # (OMP_NUM_THREADS, dataparallel.worker_env).
    # One node, and containers run with `--network none`, where the
    # hostname resolves to nothing: rendezvous and gloo stay on loopback
    # (the store's default address is the hostname, and hangs there).
    if cluster is None:
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # torchrun's own report of a failed worker runs to dozens of lines
    # after the worker's error.
    tail = collections.deque(maxlen=200)
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE,
                               universal_newlines=True,
                               start_new_session=True,
                               preexec_fn=children.die_with_this_process())
    pump = threading.Thread(target=_pump,
                            args=(process.stderr, sys.stderr, tail))
    pump.daemon = True
    pump.start()
    try:
        status = process.wait()
    except BaseException:
        # SIGTERM from the host's timeout, or Ctrl-C: take the workers down.
        children.stop(process)
        raise
    pump.join(5)
    if status != 0:
        lines = [l for l in tail if l.strip()]
        # A worker's device OOM is named first, so that the run's status
        # (harness.lifecycle) can tell it from a crash.
        reason = next((l for l in lines if device_out_of_memory(l)),
                      None) or children.telling(lines)
        raise RuntimeError("torchrun{} exited with status {}: {}".format(
            " ({})".format(rendezvous) if rendezvous else "", status,
            reason.strip()))


# --- a worker under torchrun ------------------------------------------------------

class _TorchOps(object):
    """arrays.prepare()'s operations on CPU tensors."""

    def __init__(self):
        self.torch = backend._torch()

    def tokens(self, tokens):
        return self.torch.tensor(tokens, dtype=self.torch.int64)

    def pixels(self, images):
        return self.torch.frombuffer(bytearray(images),
                                     dtype=self.torch.uint8).float().div_(255.0)

    def channel_stats(self, pixels):
        return (pixels.mean(dim=(0, 2)),
                pixels.std(dim=(0, 2)).clamp_min(1e-6))

    def images(self, images):
        return images

    def labels(self, labels):
        return self.torch.frombuffer(bytearray(labels),
                                     dtype=self.torch.uint8).long()


class _Trainer(dataparallel.Trainer):
    def __init__(self, plan, data, rank, world, device):
        super(_Trainer, self).__init__(plan, backend)
        torch = backend._torch()
        from torch.nn.parallel import DistributedDataParallel
        self.torch = torch
        self.dist = torch.distributed
        self.rank, self.world = rank, world
        self.device = device
        (self.train_x, self.train_y), (self.test_x, self.test_y) = \
            arrays.train_test(data, self.network, _TorchOps())
        self.train_x, self.train_y = self.train_x.to(device), \
            self.train_y.to(device)
        self.test_x, self.test_y = self.test_x.to(device), \
            self.test_y.to(device)
        self.model = backend.build_model(
            self.network, self.global_batch, plan["device"],
            plan["seed"]).to(device)
        self.model.train()
        self.parameters = backend.count_parameters(self.model)
        self.ddp = DistributedDataParallel(
            self.model, device_ids=[device.index] if device.type == "cuda"
            else None)
        self.optimizer = torch.optim.SGD(self.ddp.parameters(),
                                         lr=self.network.learning_rate,
                                         momentum=self.network.momentum)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.batch_per_worker = plan["global_batch_size"] // world
        self._sync = (torch.cuda.synchronize if device.type == "cuda"
                      else (lambda: None))

    def _loss(self, model, inputs, labels, reduction="mean"):
        out = model(inputs)
        if out.dim() == 3:  # (batch, steps, vocab): one prediction per token
            out = out.reshape(-1, out.shape[-1])
        labels = labels.reshape(-1)
        loss = self.torch.nn.functional.cross_entropy(out, labels,
                                                       reduction=reduction)
        return loss, out, labels

    def step(self, batch):
        mine = self.torch.tensor(dataparallel.shard(batch, self.rank, self.world),
                                 device=self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss, _, _ = self._loss(self.ddp, self.train_x[mine],
                                self.train_y[mine])
        loss.backward()
        self.optimizer.step()
        self._sync()
        return loss.item()

    def global_losses(self, losses):
        # Equal parts of the global batch: its loss is the mean over workers.
        # One all-reduce per epoch keeps collectives out of timed iterations.
        values = self.torch.tensor(losses, dtype=self.torch.float64,
                                   device=self.device)
        self.dist.all_reduce(values)
        return [v / self.world for v in values.tolist()]

    def part_losses(self, losses):
        # Reduced over the workers at the epoch's end only.
        return list(losses), "part"

    def evaluate(self):
        torch = self.torch
        result = torch.zeros(2, dtype=torch.float64, device=self.device)
        if self.rank == 0:
            self.model.eval()
            total, correct, count = 0.0, 0, 0
            with torch.no_grad():
                chunk = 1024
                for start in range(0, self.test_x.shape[0], chunk):
                    loss, out, labels = self._loss(
                        self.model, self.test_x[start:start + chunk],
                        self.test_y[start:start + chunk], "sum")
                    total += loss.item()
                    correct += (out.argmax(dim=1) == labels).sum().item()
                    count += labels.numel()
            self.model.train()
            result[0], result[1] = total / count, correct / float(count)
        # Rank 0 evaluated the whole test split; everyone gets its figures.
        self.dist.broadcast(result, 0)
        return result[0].item(), result[1].item()


def _worker(plan, out_path):
    torch = backend._torch()
    gpu = plan["device"] == "gpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.set_num_threads(plan["threads"])
    if gpu:
        torch.cuda.set_device(local_rank)
        torch.backends.cudnn.benchmark = True
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    cluster = plan.get("cluster")
    options = {}
    if cluster is not None:
        # A peer that dies or never joins fails the collective in time.
        options["timeout"] = datetime.timedelta(seconds=cluster["timeout_s"])
    torch.distributed.init_process_group("nccl" if gpu else "gloo",
                                         **options)
    try:
        rank = torch.distributed.get_rank()
        world = torch.distributed.get_world_size()
        data = dataparallel.load_data(plan["data"], plan["seed"])
        trainer = _Trainer(plan, data, rank, world, device)
        # Each node's first worker: the losses are global, the same on
        # every node, and every node writes its result; it writes the curves
        # as they grow too (those of a run cut short).
        curves = dataparallel.run_epochs(
            trainer, plan, data.train.count,
            progress=dataparallel.worker_progress(out_path, plan,
                                                  local_rank == 0))
        if local_rank == 0:
            dataparallel.write_curves(out_path, curves, trainer, plan)
    finally:
        torch.distributed.destroy_process_group()


def main(argv=None):
    return dataparallel.worker_main(_MODULE, _worker, argv)


if __name__ == "__main__":
    sys.exit(main())
