"""PyTorch data parallelism: DistributedDataParallel with one process per
worker, launched with torchrun (`python -m torch.distributed.run
--standalone`); gloo on the CPU, NCCL on GPUs.

`train` runs in the convergence process and starts torchrun; torchrun starts
`python -m harness.frameworks.pytorch.parallel --plan PLAN --out CURVES` once per
worker. Every worker builds the model with the PyTorch backend's
build_model from the same seed (DDP also broadcasts rank 0's weights),
trains on its part of each global batch, and DDP averages the gradients
over the workers during backward, i.e. over the global batch.

Run as:
    python -m harness.frameworks.pytorch.parallel --plan PLAN.json --out CURVES.json
(under torchrun only).
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading

from ... import networks, resultfile
from ...errors import HarnessError, device_out_of_memory
from .. import dataparallel
from . import backend

NAME = "pytorch"
DEVICES = ("cpu", "gpu")
PROCESS_PER_WORKER = True
MECHANISM = {
    "cpu": "DistributedDataParallel, gloo, one process per worker "
           "(torchrun --standalone)",
    "gpu": "DistributedDataParallel, NCCL, one process per GPU "
           "(torchrun --standalone)",
}
HARNESS_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def _torch():
    # Imported here so that harness.frameworks never loads a framework the run
    # does not use.
    import torch
    return torch


def gpu_count():
    torch = _torch()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


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
    """Run the workers under torchrun and return rank 0's curves."""
    with tempfile.TemporaryDirectory(prefix="dlrepro-ddp-") as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        out_path = os.path.join(tmp, "curves.json")
        resultfile.write_atomic(plan_path, plan)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [HARNESS_PARENT] + [p for p in env.get("PYTHONPATH", "").split(
                os.pathsep) if p])
        env["PYTHONUNBUFFERED"] = "1"
        # torchrun would set 1 thread per worker and warn; the plan decides.
        env["OMP_NUM_THREADS"] = str(plan["threads"])
        # One node, and containers run with `--network none`, where the
        # hostname resolves to nothing: rendezvous and gloo stay on loopback
        # (the store's default address is the hostname, and hangs there).
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        command = [sys.executable, "-m", "torch.distributed.run",
                   "--standalone", "--local-addr", "127.0.0.1",
                   "--nnodes", "1",
                   "--nproc_per_node", str(plan["workers"]),
                   "-m", "harness.frameworks.pytorch.parallel",
                   "--plan", plan_path, "--out", out_path]
        log("launching: {}".format(" ".join(command)))
        tail = collections.deque(maxlen=20)
        process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE,
                                   universal_newlines=True,
                                   start_new_session=True,
                                   preexec_fn=dataparallel.die_with_parent)
        pump = threading.Thread(target=_pump,
                                args=(process.stderr, sys.stderr, tail))
        pump.daemon = True
        pump.start()
        try:
            status = process.wait()
        except BaseException:
            # SIGTERM from the host's timeout, or Ctrl-C: take the workers down.
            _stop(process)
            raise
        pump.join(5)
        if status != 0:
            lines = [l for l in tail if l.strip()]
            # A worker's device OOM is named first, so that the run's status
            # (harness.lifecycle) can tell it from a crash.
            reason = next((l for l in lines if device_out_of_memory(l)),
                          None) or \
                next((l for l in reversed(lines)
                      if "Error" in l or "error" in l), None) or \
                (lines[-1] if lines else "no output")
            raise RuntimeError("torchrun exited with status {}: {}".format(
                status, reason.strip()))
        with open(out_path) as handle:
            return json.load(handle)


def _stop(process):
    import signal
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
    except (OSError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            pass


# --- a worker under torchrun ------------------------------------------------------

def _tensors(split, dataset, network, stats=None):
    """(inputs, labels) of a split as CPU tensors shaped for `network`;
    images scaled to [0, 1], then standardised per channel with the
    training split's mean and std (`stats`, computed when None)."""
    torch = _torch()
    if dataset.kind == "tokens":
        steps = network.input_shape[0]
        tokens = torch.tensor(split.tokens, dtype=torch.int64)
        n = split.count
        return (tokens[:n * steps].reshape(n, steps),
                tokens[1:n * steps + 1].reshape(n, steps)), None
    channels = dataset.sample_shape[0]
    pixels = torch.frombuffer(bytearray(split.images), dtype=torch.uint8)
    images = pixels.reshape(split.count, channels, -1).float().div_(255.0)
    if stats is None:
        mean = images.mean(dim=(0, 2))
        std = images.std(dim=(0, 2)).clamp_min(1e-6)
        stats = (mean, std)
    images = (images - stats[0][None, :, None]) / stats[1][None, :, None]
    labels = torch.frombuffer(bytearray(split.labels),
                              dtype=torch.uint8).long()
    return (images.reshape((split.count,) + tuple(network.input_shape)),
            labels), stats


class _Trainer(object):
    def __init__(self, plan, data, rank, world, device):
        torch = _torch()
        from torch.nn.parallel import DistributedDataParallel
        self.torch = torch
        self.dist = torch.distributed
        self.rank, self.world = rank, world
        self.device = device
        self.network = networks.get(plan["network"])
        (self.train_x, self.train_y), stats = _tensors(
            data.train, data.dataset, self.network)
        (self.test_x, self.test_y), _ = _tensors(
            data.test, data.dataset, self.network, stats)
        self.train_x, self.train_y = self.train_x.to(device), \
            self.train_y.to(device)
        self.test_x, self.test_y = self.test_x.to(device), \
            self.test_y.to(device)
        torch.manual_seed(plan["seed"])
        self.model = backend.build_model(self.network).to(device)
        self.model.train()
        self.parameters = sum(p.numel() for p in self.model.parameters()
                              if p.requires_grad)
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


def _worker(plan_path, out_path):
    torch = _torch()
    with open(plan_path) as handle:
        plan = json.load(handle)
    gpu = plan["device"] == "gpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.set_num_threads(plan["threads"])
    if gpu:
        torch.cuda.set_device(local_rank)
        torch.backends.cudnn.benchmark = True
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    torch.distributed.init_process_group("nccl" if gpu else "gloo")
    try:
        rank = torch.distributed.get_rank()
        world = torch.distributed.get_world_size()
        data = dataparallel.load_data(plan["data"], plan["seed"])
        trainer = _Trainer(plan, data, rank, world, device)
        curves = dataparallel.run_epochs(trainer, plan, data.train.count)
        if rank == 0:
            curves["framework_parameters"] = trainer.parameters
            curves["versions"] = backend.versions(plan["device"])
            curves["framework_threads"] = torch.get_num_threads()
            resultfile.write_atomic(out_path, resultfile.json_safe(curves))
    finally:
        torch.distributed.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m harness.frameworks.pytorch.parallel")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        _worker(args.plan, args.out)
    except HarnessError as exc:
        sys.stderr.write("harness: error: {}\n".format(exc))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
