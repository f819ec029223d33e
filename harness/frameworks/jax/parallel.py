"""JAX data parallelism: `shard_map` over a one-axis mesh of N devices in
one process; on the CPU N host devices (jax_num_cpu_devices, what
--xla_force_host_platform_device_count sets), on GPUs N GPUs.

The model comes from the JAX backend's build_model. Parameters and the
optimizer state are replicated; each replica takes its contiguous part of
the global batch (the batch is laid out over the mesh's axis, so replica r
holds dataparallel.shard(batch, r, N)), its loss is its part's summed
per-sample cross-entropy divided by the global batch, and the replicas' gradients
are summed (an all-reduce, NCCL on GPUs: the psum that shard_map's
autodiff inserts for replicated parameters), so that every replica
applies the update of the global batch's mean loss, as dataparallel
describes. Batch-norm statistics are each replica's own (as in DDP without
SyncBatchNorm); evaluation uses replica 0's.

Across nodes (docs/multinode.md): one JAX process per node,
jax.distributed.initialize(coordinator, num_processes, process_id) with
the coordinator's service on node 0 at the cluster's base port, CPU
collectives over gloo (jax_cpu_collectives_implementation). The mesh spans
every process's devices in process order, so replica r is global rank r and
takes its shard of the batch as on one node; every process puts the same
global batch and keeps its own devices' parts. The cluster's timeout_s
bounds the initialisation (the wait for the other processes) and the
heartbeats. JAX aborts the process when its coordination fails (a lost
peer, a timeout, a taken port), so on a node the training runs in a child
process (`python -m harness.frameworks.jax.parallel --plan PLAN --out
CURVES`) and the convergence process turns its end into the run's error. Each node evaluates with its first replica's batch-norm
statistics (node 0's are replica 0's).
"""
import sys

from .. import arrays, backends, children, dataparallel
from ...errors import HarnessError, Unsupported
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

MECHANISM = {
    "cpu": "jax.shard_map over N host devices (jax_num_cpu_devices) in one "
           "process, gradients psum-reduced (replicas share the cores)",
    "gpu": "jax.shard_map over N GPUs in one process, gradients "
           "psum-reduced (NCCL all-reduce)",
}
_MULTI_NODE = True
_TRANSPORT = {
    "cpu": "gloo over {interface} (jax_cpu_collectives_implementation); "
           "jax.distributed coordinator (gRPC) on node 0",
    "gpu": "NCCL over {interface}; jax.distributed coordinator (gRPC) on "
           "node 0",
}
CAPABILITIES = backends.parallel_capabilities(
    process_per_worker=False,
    multi_node=_MULTI_NODE,
    transport=_TRANSPORT)
AXIS = "workers"
_MODULE = "harness.frameworks.jax.parallel"


def _shard_map(jax):
    """jax.shard_map (JAX 0.7 and newer), whose autodiff sums the gradients
    of replicated inputs (see replica_step). The older
    jax.experimental.shard_map is not used: whether its transpose sums them
    depends on its check_rep mode, which was not verified here."""
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
        raise Unsupported("JAX {} has no jax.shard_map (0.7 or newer); its "
                          "data parallelism is not supported here".format(
                              jax.__version__))
    return shard_map


def _to_nhwc(array):
    if array.ndim == 4:
        return array.transpose(0, 2, 3, 1).copy()
    return array


def per_sample_losses(logits, labels):
    """Softmax cross-entropy per sample; for token outputs (batch, steps,
    classes) the mean over a sample's tokens."""
    optax = backend._optax()
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    if losses.ndim == 2:
        losses = losses.mean(axis=1)
    return losses


class _Trainer(dataparallel.Trainer):
    # global_losses: the step already reduces over the replicas.

    def __init__(self, plan, data):
        super(_Trainer, self).__init__(plan, backend)
        device = plan["device"]
        self.multi = plan.get("nodes", 1) > 1
        local = plan.get("workers_per_node", self.workers)
        backend.configure_workers(
            plan["threads"], device, plan["seed"],
            local if device == "cpu" else None,
            _initializer(plan) if self.multi else None)
        jax = backend._jax()
        np = backend._np()
        self.jax = jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        # Every process's devices in process order (one process: its own):
        # mesh position r is global rank r.
        devices = sorted(jax.devices("gpu" if device == "gpu" else "cpu"),
                         key=lambda d: (d.process_index, d.id))
        if len(devices) < self.workers:
            # On the CPU: JAX started before configure() could ask for the
            # host devices.
            raise HarnessError("{} workers need {} {} devices; JAX sees "
                               "{}".format(self.workers, self.workers, device,
                                           len(devices)))
        mesh = Mesh(np.array(devices[:self.workers]), (AXIS,))
        self.split = NamedSharding(mesh, PartitionSpec(AXIS))
        self.replicated = NamedSharding(mesh, PartitionSpec())
        (train_x, train_y), (test_x, test_y) = arrays.train_test(
            data, self.network)
        dtype = "int32" if self.network.input_dtype == "int64" else "float32"
        self.train_x = _to_nhwc(train_x).astype(dtype)
        self.test_x = _to_nhwc(test_x).astype(dtype)
        self.train_y = train_y.astype("int32")
        self.test_y = test_y.astype("int32")
        # Host values: device_put below places them on every process's
        # devices (committed to one local device they could not move).
        model = backend.Model(self.network, plan["seed"])
        self.model = model
        optimizer = backend.make_optimizer(self.network)
        self.parameters = backend.count_parameters(model)
        self.params = jax.device_put(model.params, self.replicated)
        self.opt_state = jax.device_put(optimizer.init(model.params),
                                        self.replicated)
        # One copy of the batch-norm statistics per replica, stacked.
        self.state = jax.device_put(
            jax.tree_util.tree_map(
                lambda leaf: np.stack([np.asarray(leaf)] * self.workers),
                model.state), self.split)
        self._step = self._make_step(mesh, optimizer)
        self._evaluate = jax.jit(self._eval_chunk)

    def _make_step(self, mesh, optimizer):
        jax = self.jax
        optax = backend._optax()
        from jax.sharding import PartitionSpec as P
        apply, scale = self.model.apply, float(self.global_batch)

        def objective(params, state, inputs, labels):
            logits, state = apply(params, state, inputs, True)
            return per_sample_losses(logits, labels).sum() / scale, state

        def replica_step(params, state, opt_state, inputs, labels):
            state = jax.tree_util.tree_map(lambda leaf: leaf[0], state)
            (loss, state), grads = jax.value_and_grad(
                objective, has_aux=True)(params, state, inputs, labels)
            # No psum of the gradients here: the parameters enter
            # replicated (invariant over the axis), and the transpose of
            # their implicit broadcast to the varying replicas is a psum,
            # which autodiff already inserted (shard_map's check_vma, on
            # by default). The loss is summed explicitly.
            loss = jax.lax.psum(loss, AXIS)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            state = jax.tree_util.tree_map(lambda leaf: leaf[None], state)
            return (optax.apply_updates(params, updates), state, opt_state,
                    loss)

        step = _shard_map(jax)(
            replica_step, mesh=mesh,
            in_specs=(P(), P(AXIS), P(), P(AXIS), P(AXIS)),
            out_specs=(P(), P(AXIS), P(), P()))
        return jax.jit(step, donate_argnums=(0, 1, 2))

    def step(self, batch):
        jax = self.jax
        inputs = jax.device_put(self.train_x[batch], self.split)
        labels = jax.device_put(self.train_y[batch], self.split)
        self.params, self.state, self.opt_state, loss = self._step(
            self.params, self.state, self.opt_state, inputs, labels)
        jax.block_until_ready((self.params, self.state, self.opt_state, loss))
        return float(loss)

    def _eval_chunk(self, params, state, inputs, labels):
        jnp = self.jax.numpy
        logits, _ = self.model.apply(params, state, inputs, False)
        correct = (jnp.argmax(logits, axis=-1) == labels).sum()
        return per_sample_losses(logits, labels).sum(), correct

    def _first_state(self):
        """This process's first replica's statistics (replica 0's on one
        node): a multi-process array is not fetched whole."""
        np = backend._np()
        if not self.multi:
            return self.jax.tree_util.tree_map(
                lambda leaf: leaf[0], self.jax.device_get(self.state))
        return self.jax.tree_util.tree_map(
            lambda leaf: np.asarray(leaf.addressable_shards[0].data)[0],
            self.state)

    def evaluate(self):
        jax = self.jax
        # Replica 0's statistics; everything on the parameters' devices.
        state = jax.device_put(self._first_state(), self.replicated)
        total, correct, count = 0.0, 0, 0
        chunk = 1024
        for start in range(0, len(self.test_y), chunk):
            inputs = jax.device_put(self.test_x[start:start + chunk],
                                    self.replicated)
            labels = jax.device_put(self.test_y[start:start + chunk],
                                    self.replicated)
            loss, hits = self._evaluate(self.params, state, inputs, labels)
            total += float(loss)
            correct += int(hits)
            count += labels.size
        # Accuracy counts tokens for the LSTM, samples otherwise; the loss
        # is per sample (per-token mean within a sample).
        return total / len(self.test_y), correct / float(count)


def _initializer(plan):
    """jax.distributed.initialize for this node, gloo for CPU collectives;
    failures name the coordinator."""
    cluster = plan["cluster"]
    coordinator = "{}:{}".format(cluster["coordinator"], cluster["port"])
    timeout = int(max(1, round(cluster["timeout_s"])))

    def initialize(jax):
        if plan["device"] == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        try:
            # Its preemption notifier takes SIGTERM over: the node's
            # process would then train on when stopped (or orphaned: its
            # parent's death is a SIGTERM) instead of writing the curves
            # so far and ending (dataparallel.worker_main).
            jax.config.update("jax_enable_preemption_service", False)
        except (AttributeError, KeyError, ValueError):
            pass
        try:
            jax.distributed.initialize(
                coordinator_address=coordinator,
                num_processes=cluster["nodes"],
                process_id=cluster["node_rank"],
                # Given, so that JAX's Slurm detection (SLURM_* are in the
                # environment) does not narrow a node to the GPU of
                # SLURM_LOCALID: this node's workers are its devices.
                local_device_ids=list(range(plan["workers_per_node"])),
                # The cluster's address, not JAX's default [::], which
                # needs IPv6.
                coordinator_bind_address=coordinator,
                initialization_timeout=timeout,
                heartbeat_timeout_seconds=timeout)
        except Exception as exc:  # XlaRuntimeError and kin: one line
            raise RuntimeError(
                "JAX's rendezvous (jax.distributed coordinator at {}, {} "
                "processes, {} s timeout) failed: {}".format(
                    coordinator, cluster["nodes"], timeout,
                    (str(exc).strip().splitlines() or [repr(exc)])[0]))
    return initialize


def train(plan, data, log):
    if plan.get("nodes", 1) <= 1:
        return dataparallel.train_here(_Trainer(plan, data), plan, data)
    cluster = plan["cluster"]
    what = "JAX's node {} (jax.distributed coordinator at {}:{}, {} " \
        "processes, {:g} s rendezvous timeout)".format(
            cluster["node_rank"], cluster["coordinator"], cluster["port"],
            cluster["nodes"], cluster["timeout_s"])
    children.refuse_taken_port(cluster, what)

    def run(command, env):
        children.run_child(command, env, what)
    return dataparallel.launch(plan, log, [sys.executable, "-m", _MODULE],
                               run, prefix="dlrepro-jax-")


def main(argv=None):
    """One node's JAX process (under train() only)."""
    return dataparallel.trainer_main(_MODULE, _Trainer, argv)


if __name__ == "__main__":
    sys.exit(main())
