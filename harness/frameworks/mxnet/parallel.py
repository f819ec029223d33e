"""MXNet data parallelism: Gluon with one context per worker in one process
(mx.cpu(0..N-1) on the CPU, mx.gpu(0..N-1) on GPUs), the global batch cut
with gluon.utils.split_and_load, and gradients summed by a kvstore: 'local'
on the CPU, 'device' on GPUs (the paper's setting).

The model comes from the MXNet backend's build_model, initialised on every
context from one draw. Every context's loss is per sample; backward sums
the gradients of its part, the kvstore sums them over the contexts, and
Trainer.step(global batch) divides by the global batch: the update that
dataparallel describes.

Across nodes (docs/multinode.md): kvstore 'dist_sync' (ps-lite). Node 0
starts a scheduler and one server as child processes (`import mxnet` with
DMLC_ROLE scheduler / server: they serve until the workers finish); every
node runs one worker process with its workers_per_node contexts, which
trains the node's contiguous part of each global batch (global ranks
node_rank * workers_per_node + i). The server only sums (no optimizer on
it: update_on_kvstore=False), every worker pulls the sum of all gradients
and applies the update itself with Trainer.step(global batch): the global
batch's mean gradient, as on one node. The Trainer's keys are initialised
from ps-lite's worker 0 and pulled into every node's weights before
training (_broadcast_before_training), not inside its first step. The
epoch's losses are summed the same way (one push and pull per epoch).
ps-lite waits for its peers without a limit, so the worker reports when
its kvstore is up and the node gives up after the cluster's timeout_s if
it does not; a peer lost later blocks the others until the job's time
limit (ps-lite does not fail a blocked pull).
"""
import json
import os
import subprocess
import sys
import time

from .. import arrays, backends, children, dataparallel
from ...errors import HarnessError
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

MECHANISM = {
    "cpu": "Gluon, contexts mx.cpu(0..N-1) in one process, split_and_load, "
           "kvstore 'local' (contexts share the cores)",
    "gpu": "Gluon, contexts mx.gpu(0..N-1), split_and_load, kvstore 'device'",
}
_MULTI_NODE = True
_TRANSPORT = {
    "cpu": "ps-lite (ZeroMQ over TCP) over {interface}: kvstore dist_sync, "
           "scheduler and server on node 0",
    "gpu": "ps-lite (ZeroMQ over TCP) over {interface}: kvstore dist_sync, "
           "scheduler and server on node 0",
}
CAPABILITIES = backends.parallel_capabilities(
    process_per_worker=False,
    multi_node=_MULTI_NODE,
    transport=_TRANSPORT)
_MODULE = "harness.frameworks.mxnet.parallel"
# The kvstore key of the epoch's losses (the Trainer's keys are the
# parameters' indices).
_LOSS_KEY = 999999
# A file prefix: each node's worker appends what its first steps did to
# every kvstore key to PREFIX.node<rank>.jsonl (_FirstSteps).
TRACE_ENV = "DLREPRO_MXNET_TRACE"
_TRACED_STEPS = 2


class _Trainer(dataparallel.Trainer):
    # global_losses: the step already sums over the contexts.

    def __init__(self, plan, data):
        # Before MXNet loads: it reads its thread settings at import.
        backend.configure(plan["threads"], plan["device"], plan["seed"])
        super(_Trainer, self).__init__(plan, backend)
        mx = backend._mx()
        self.mx = mx
        gpu = plan["device"] == "gpu"
        self.nodes = plan.get("nodes", 1)
        self.node_rank = plan.get("node_rank", 0)
        local = plan.get("workers_per_node", self.workers)
        self.contexts = [mx.gpu(i) if gpu else mx.cpu(i)
                         for i in range(local)]
        (train_x, self.train_y), (test_x, self.test_y) = arrays.train_test(
            data, self.network)
        # Word ids travel as float32 (exact below 2**24), the type Gluon's
        # Embedding and loss take; labels too.
        self.train_x = train_x.astype("float32")
        self.test_x = test_x.astype("float32")
        model = backend.build_model(self.network, self.global_batch,
                                    plan["device"], plan["seed"])
        # Initialised on one context, then copied to every worker's: the
        # same weights as initialising on all of them.
        model.collect_params().reset_ctx(self.contexts)
        self.model = backend.hybridize(model)
        self.parameters = backend.count_parameters(self.model)
        self.loss = backend.loss_block()
        options = {}
        if self.nodes > 1:
            self.kvstore = mx.kv.create("dist_sync")
            # The sum only, on the server; the update on every worker.
            options = {"kvstore": self.kvstore, "update_on_kvstore": False}
            _ready(plan)
        else:
            options = {"kvstore": "device" if gpu else "local"}
        self.trainer = mx.gluon.Trainer(
            self.model.collect_params(), "sgd",
            {"learning_rate": self.network.learning_rate,
             "momentum": self.network.momentum}, **options)
        if self.nodes > 1:
            _broadcast_before_training(mx, self.trainer)
        self._losses_ready = False
        self._trace = _FirstSteps.from_env(self)

    def _split(self, values):
        # split_and_load cuts axis 0 into equal contiguous parts in context
        # order: part r is dataparallel.shard(batch, r, workers).
        return self.mx.gluon.utils.split_and_load(
            self.mx.nd.array(values, dtype="float32"), self.contexts,
            even_split=True)

    def step(self, batch):
        mx = self.mx
        # This node's contiguous part: its contexts' shards, in rank order.
        batch = dataparallel.shard(batch, self.node_rank, self.nodes)
        inputs = self._split(self.train_x[batch])
        labels = self._split(self.train_y[batch].astype("float32"))
        with mx.autograd.record():
            losses = [self.loss(self.model(x), y)
                      for x, y in zip(inputs, labels)]
        for loss in losses:
            loss.backward()
        traced = self._trace.before_step() if self._trace else None
        self.trainer.step(self.global_batch)
        # The engine is asynchronous: the iteration ends when the updates on
        # every context have run, not when the loss alone is ready.
        mx.nd.waitall()
        if traced is not None:
            self._trace.after_step(traced)
        return sum(float(l.sum().asscalar()) for l in losses) / \
            self.global_batch

    def part_losses(self, losses):
        if self.nodes <= 1:
            return list(losses), "global"
        # This node's part's sum / global batch: its part's mean is that
        # times the nodes (equal parts).
        return [v * self.nodes for v in losses], "part"

    def global_losses(self, losses):
        if self.nodes <= 1:
            return losses
        # Each node's losses are its part's sum / global batch: the sum over
        # the nodes is the global batch's loss.
        mx = self.mx
        values = mx.nd.array(losses, dtype="float64")
        if not self._losses_ready:
            self.kvstore.init(_LOSS_KEY, mx.nd.zeros(len(losses),
                                                     dtype="float64"))
            self._losses_ready = True
        self.kvstore.push(_LOSS_KEY, values)
        self.kvstore.pull(_LOSS_KEY, out=values)
        return [float(v) for v in values.asnumpy()]

    def evaluate(self):
        mx = self.mx
        context = self.contexts[0]
        total, correct, count = 0.0, 0, 0
        # The hybridized graph has static shapes: evaluate in parts of one
        # context's training batch, the last part padded and trimmed.
        chunk = self.global_batch // self.workers
        n = len(self.test_y)
        for start in range(0, n, chunk):
            x = self.test_x[start:start + chunk]
            y = self.test_y[start:start + chunk]
            real = len(y)
            if real < chunk:
                x = _pad(x, chunk)
                y = _pad(y, chunk)
            out = self.model(mx.nd.array(x, ctx=context, dtype="float32"))
            loss = self.loss(out, mx.nd.array(y, ctx=context,
                                              dtype="float32"))
            total += float(loss[:real].sum().asscalar())
            predicted = out.argmax(axis=-1)[:real].asnumpy()
            correct += int((predicted == y[:real]).sum())
            count += y[:real].size
        return total / n, correct / float(count)


class _FirstSteps(object):
    """Every kvstore key's arrays in a node's first steps, as sums and
    largest magnitudes (docs/multinode.md, "MXNet's two-node curve"): the
    weights before and after, this node's own gradient and the sum over
    the nodes that the kvstore left in its place. Summed over the nodes,
    the own gradients' sums must give the pulled sum's (up to rounding),
    and the weights move by -lr/global batch times it (first step); a
    diverging run's traces name the key that broke and how.

    The own gradient is copied by an engine operation queued between the
    backward and the pushpull, so nothing waits for it; the rest is read
    after the step's waitall."""

    def __init__(self, path, trainer):
        self.path, self.trainer, self.step = path, trainer, 0
        self.context = trainer.contexts[0]
        self.params = list(trainer.model.collect_params().values())

    @classmethod
    def from_env(cls, trainer):
        prefix = os.environ.get(TRACE_ENV)
        if not prefix or trainer.nodes <= 1:
            return None
        return cls(trace_path(prefix, trainer.node_rank), trainer)

    def before_step(self):
        if self.step >= _TRACED_STEPS:
            return None
        return ([p.grad(self.context).copy() for p in self.params],
                [_summary(p.data(self.context)) for p in self.params])

    def after_step(self, traced):
        own, before = traced
        keys = []
        for index, param in enumerate(self.params):
            keys.append({"key": index, "name": param.name,
                         "weights_before": before[index],
                         "own_gradient": _summary(own[index]),
                         "pulled_sum": _summary(param.grad(self.context)),
                         "weights_after": _summary(param.data(
                             self.context))})
        self.step += 1
        line = {"node_rank": self.trainer.node_rank,
                "pslite_rank": self.trainer.kvstore.rank,
                "step": self.step, "keys": keys}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(line) + "\n")


def trace_path(prefix, node_rank):
    """Where node `node_rank`'s worker writes its first steps."""
    return "{}.node{}.jsonl".format(prefix, node_rank)


def _summary(array):
    values = array.asnumpy().astype("float64")
    return {"sum": float(values.sum()), "size": int(values.size),
            "max_abs": float(abs(values).max()) if values.size else 0.0}


def _broadcast_before_training(mx, trainer):
    """Every parameter's kvstore key initialised from ps-lite's worker 0
    and pulled into every node's weights, finished before training.

    Gluon's Trainer does this inside its first step(), after that step's
    forward and backward have run on each node's own draw of the weights:
    the first gradient of a node whose draw differed would be summed in
    unnoticed. Done here, every node trains from worker 0's weights from
    the first step on, and the kvstore's keys hold weights until the first
    gradients reach the server (which only sums: from then on they hold
    gradient sums). Uses the Trainer's own initialisation (MXNet 1.x
    private methods; no public one exists)."""
    trainer._init_kvstore()
    trainer._init_params()
    if trainer._params_to_init:
        raise HarnessError("MXNet's Trainer left parameters with deferred "
                           "initialisation: {}".format(", ".join(
                               p.name for p in trainer._params_to_init)))
    mx.nd.waitall()


def _pad(values, size):
    np = arrays._np()
    extra = np.zeros((size - len(values),) + values.shape[1:],
                     dtype=values.dtype)
    return np.concatenate([values, extra])


def train(plan, data, log):
    if plan.get("nodes", 1) <= 1:
        return dataparallel.train_here(_Trainer(plan, data), plan, data)
    cluster = plan["cluster"]
    what = ("MXNet's node {} (kvstore dist_sync, ps-lite scheduler at {}:{}, "
            "{} workers, {:g} s rendezvous timeout)".format(
                cluster["node_rank"], cluster["coordinator"], cluster["port"],
                cluster["nodes"], cluster["timeout_s"]))
    children.refuse_taken_port(cluster, what)

    def run(command, env):
        _run_node(command, env, plan, what)
    return dataparallel.launch(plan, log, [sys.executable, "-m", _MODULE],
                               run, prefix="dlrepro-mxnet-")


def _ps_env(env, cluster, role):
    """ps-lite's variables for `role` on this node."""
    env = dict(env)
    env.update({
        "DMLC_ROLE": role,
        "DMLC_PS_ROOT_URI": cluster["coordinator"],
        "DMLC_PS_ROOT_PORT": str(cluster["port"]),
        "DMLC_NUM_SERVER": "1",
        "DMLC_NUM_WORKER": str(cluster["nodes"]),
        "DMLC_NODE_HOST": cluster["addresses"][cluster["node_rank"]],
    })
    if cluster["interface"]:
        env["DMLC_INTERFACE"] = cluster["interface"]
    return env


def _run_node(command, env, plan, what):
    """Node 0: scheduler and server; every node: its worker, given
    timeout_s to bring its kvstore up (the rendezvous)."""
    cluster = plan["cluster"]
    services = []
    try:
        if cluster["node_rank"] == 0:
            for role in ("scheduler", "server"):
                services.append(subprocess.Popen(
                    [sys.executable, "-c", "import mxnet"],
                    env=_ps_env(env, cluster, role), start_new_session=True,
                    preexec_fn=children.die_with_this_process()))
        ready = _ready_path(command[-1])
        worker_env = _ps_env(env, cluster, "worker")
        worker_env["DLREPRO_MXNET_READY"] = ready
        watch = _Watchdog(ready, cluster["timeout_s"])
        try:
            children.run_child(command, worker_env, what,
                                   on_start=watch.start)
        except RuntimeError:
            if watch.expired:
                raise RuntimeError("{}: the rendezvous did not complete "
                                   "within {:g} s (a node that never "
                                   "came?)".format(what, cluster["timeout_s"]))
            raise
        finally:
            watch.stop()
    finally:
        for service in services:
            children.stop(service)


def _ready_path(out_path):
    return out_path + ".ready"


def _ready(plan):
    """The worker's kvstore is up: every node has joined."""
    path = os.environ.get("DLREPRO_MXNET_READY")
    if path:
        with open(path, "w") as handle:
            handle.write("ready\n")


class _Watchdog(object):
    """Stops the worker's process group when its kvstore is not up after
    `timeout_s` (ps-lite would wait forever)."""

    def __init__(self, ready, timeout_s):
        import threading
        self.ready, self.timeout_s = ready, timeout_s
        self.expired = False
        self.process = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch)
        self._thread.daemon = True

    def start(self, process):
        self.process = process
        self._thread.start()

    def stop(self):
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _watch(self):
        deadline = time.time() + self.timeout_s
        while not self._done.wait(0.2):
            if os.path.exists(self.ready):
                return
            if time.time() > deadline:
                self.expired = True
                children.stop(self.process)
                return


def main(argv=None):
    """One node's MXNet worker (under train() only)."""
    return dataparallel.trainer_main(_MODULE, _Trainer, argv)


if __name__ == "__main__":
    sys.exit(main())
