"""Caffe training for convergence runs: one worker, Caffe's own SGD solver.

Caffe 1.0's data parallelism is multi-GPU only: `caffe train --gpu 0,1,...`
(or pycaffe's caffe.NCCL with one process per GPU) synchronises the solvers
with NCCL. There is none on the CPU, so a CPU run with more than one worker
is `unsupported`, with that reason; so is a GPU run with more than one
worker in a build without NCCL (Ubuntu's caffe-cuda 1.0.0-6build1 does not
link it), which this module cannot do otherwise either.

One worker: the backend's solver at the global batch, each iteration's
samples copied into the net's Input blobs, then `solver.step(1)`. Evaluation
runs a TEST-phase net that shares the trained layers (weights and batch-norm
statistics: Net.share_with), forward only, in parts of the training batch
(the last padded and trimmed); the loss and accuracy are computed from its
logits.
"""
import math

from .. import arrays, backends, dataparallel
from ...errors import Unsupported
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

MECHANISM = {
    "cpu": "one worker: Caffe's SGDSolver.step(1) (Caffe has no CPU data "
           "parallelism)",
    "gpu": "one worker: Caffe's SGDSolver.step(1); multi-GPU (caffe train "
           "--gpu with NCCL) is not driven by this harness",
}
_MULTI_NODE = ("Caffe 1.0's data parallelism is one machine's GPUs (caffe "
              "train --gpu 0,1,... synchronised by NCCL within the "
              "process); it has no multi-node training")
CAPABILITIES = backends.parallel_capabilities(
    process_per_worker=False,
    multi_node=_MULTI_NODE)
MULTI_WORKER_REFUSAL = {
    "cpu": "Caffe 1.0 has no CPU data parallelism: its multi-worker "
           "training is multi-GPU only (caffe train --gpu 0,1,... with "
           "NCCL)",
    "gpu": "Caffe 1.0's multi-GPU training (caffe train --gpu 0,1,... with "
           "NCCL) is not driven by this harness, and Ubuntu's caffe-cuda "
           "1.0.0-6build1 is built without NCCL",
}


def refusal(plan):
    """Why `plan` cannot be trained here, or None."""
    if plan["workers"] > 1:
        return MULTI_WORKER_REFUSAL[plan["device"]]
    return None


class _Trainer(dataparallel.Trainer):
    # global_losses: one worker, its loss is the global batch's.

    def __init__(self, plan, data):
        backend.configure(plan["threads"], plan["device"], plan["seed"])
        super(_Trainer, self).__init__(plan, backend)
        (self.train_x, self.train_y), (self.test_x, self.test_y) = \
            arrays.train_test(data, self.network)
        self.solver = backend.build_model(self.network, self.global_batch,
                                          plan["device"], plan["seed"])
        self.net = self.solver.net
        self.parameters = backend.count_parameters(self.solver)
        self.test_net = backend.forward_net(self.network, self.global_batch)
        self.test_net.share_with(self.net)

    def step(self, batch):
        backend.feed(self.net, self.network, self.train_x[batch],
                     self.train_y[batch])
        self.solver.step(1)
        return float(self.net.blobs["loss"].data)

    def evaluate(self):
        np = backend._numpy()
        chunk = self.global_batch
        n = len(self.test_y)
        total, correct, count = 0.0, 0, 0
        for start in range(0, n, chunk):
            x = self.test_x[start:start + chunk]
            y = self.test_y[start:start + chunk]
            real = len(y)
            if real < chunk:
                x = _pad(np, x, chunk)
            backend.feed(self.test_net, self.network, x, None)
            self.test_net.forward()
            logits = backend.batch_major(self.network,
                                         self.test_net.blobs["output"].data)
            logits = logits[:real].reshape(-1, logits.shape[-1]).astype(
                np.float64)
            labels = np.asarray(y).reshape(-1)
            top = logits.max(axis=1, keepdims=True)
            log_norm = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
            total += float((log_norm - logits[np.arange(len(labels)),
                                                labels]).sum())
            correct += int((logits.argmax(axis=1) == labels).sum())
            count += labels.size
        # The mean per sample (per token for sequences), like the training
        # loss.
        return total / count, correct / float(count) if count else math.nan


def _pad(np, values, size):
    extra = np.zeros((size - len(values),) + values.shape[1:],
                     dtype=values.dtype)
    return np.concatenate([values, extra])


def train(plan, data, log):
    reason = refusal(plan)
    if reason:
        raise Unsupported(reason)
    return dataparallel.train_here(_Trainer(plan, data), plan, data)
