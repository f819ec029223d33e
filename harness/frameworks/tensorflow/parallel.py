"""TensorFlow data parallelism: tf.distribute.MirroredStrategy, one replica
per worker in one process; on the CPU over N logical CPU devices
(tf.config.set_logical_device_configuration), on GPUs over N GPUs.

The model comes from the TensorFlow backend's build_model, created under
the strategy's scope so that every replica holds a mirrored copy. Each
replica's loss is its part's summed cross-entropy divided by the global
batch, and the optimizer sums the replicas' gradients: the update that
dataparallel describes.

Across nodes (docs/multinode.md): tf.distribute.MultiWorkerMirroredStrategy,
one TensorFlow worker process per node (on the CPU its one replica is the
node's CPU device), gradients and losses all-reduced by TensorFlow's
collective ops over gRPC. The cluster comes from SlurmClusterResolver when
Slurm's step variables are in the environment (checked against the cluster
object, whose addresses replace Slurm's node names: those need not resolve
inside a container), else from a TF_CONFIG built from the cluster object.
Replica ids are global (task * local replicas + local), so replica r takes
dataparallel.shard(batch, r, workers) as on one node. The cluster's
timeout_s bounds the wait for the other workers (the coordination
service's registration), a silent peer (its heartbeat) and every
collective.
"""
import json
import os

from .. import arrays, backends, children, dataparallel
from ...errors import HarnessError
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

MECHANISM = {
    "cpu": "tf.distribute.MirroredStrategy over N logical CPU devices in "
           "one process (replicas share the cores)",
    "gpu": "tf.distribute.MirroredStrategy over N GPUs (NCCL all-reduce)",
}
_MULTI_NODE = True
_WORKERS_PER_NODE = {
    "cpu": (1, "TensorFlow's MultiWorkerMirroredStrategy runs one replica "
               "per worker process on the CPU (its one CPU device; logical "
               "CPU devices are MirroredStrategy's, on one node): use one "
               "worker per node"),
}
_TRANSPORT = {
    "cpu": "gRPC over {interface} (TensorFlow collective ops, ring "
           "all-reduce; MultiWorkerMirroredStrategy)",
    "gpu": "NCCL all-reduce, gRPC control over {interface} "
           "(MultiWorkerMirroredStrategy)",
}
CAPABILITIES = backends.parallel_capabilities(
    process_per_worker=False,
    multi_node=_MULTI_NODE,
    workers_per_node=_WORKERS_PER_NODE,
    transport=_TRANSPORT)


def _devices(tf, device, workers, nodes=1):
    if nodes > 1:
        # MultiWorkerMirroredStrategy's replicas: this worker's device.
        return None
    if device == "gpu":
        return ["/gpu:{}".format(i) for i in range(workers)]
    # Must happen before the runtime starts, i.e. before the first op.
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(workers)])
    return ["/cpu:{}".format(i) for i in range(workers)]


def _to_layout(array, fmt):
    if array.ndim == 4 and fmt == "channels_last":
        return array.transpose(0, 2, 3, 1).copy()
    return array


class _Trainer(dataparallel.Trainer):
    # global_losses: the step already reduces over the replicas.

    def __init__(self, plan, data):
        super(_Trainer, self).__init__(plan, backend)
        tf = backend._tf()
        self.tf = tf
        nodes = plan.get("nodes", 1)
        self.cluster = plan.get("cluster") if nodes > 1 else None
        devices = _devices(tf, plan["device"], self.workers, nodes)
        backend.configure(plan["threads"], plan["device"], plan["seed"])
        # Before the first op: the multi-worker strategy starts the runtime.
        self.strategy = _multi_worker(tf, plan) if nodes > 1 else \
            tf.distribute.MirroredStrategy(devices=devices)
        self.fmt = backend.data_format(plan["device"])
        (train_x, train_y), (test_x, test_y) = arrays.train_test(
            data, self.network)
        int_inputs = self.network.input_dtype == "int64"
        self.train_x = _to_layout(train_x, self.fmt).astype(
            "int32" if int_inputs else "float32")
        self.test_x = _to_layout(test_x, self.fmt).astype(self.train_x.dtype)
        self.train_y = train_y.astype("int32")
        self.test_y = test_y.astype("int32")
        with self.strategy.scope():
            self.model = backend.build_model(
                self.network, self.global_batch, plan["device"],
                plan["seed"])
            self.optimizer = backend.make_optimizer(self.network)
            build = getattr(self.optimizer, "build", None)
            if build is not None:
                # Keras >= 2.11 makes the slots here, not in the traced step.
                build(self.model.trainable_variables)
        self.parameters = backend.count_parameters(self.model)
        self._step = self._make_step()
        self._sync = (tf.test.experimental.sync_devices
                      if plan["device"] == "gpu" and hasattr(
                          getattr(tf.test, "experimental", None),
                          "sync_devices") else (lambda: None))

    def _per_sample(self, labels, logits):
        tf = self.tf
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=labels, logits=logits)
        if len(losses.shape) == 2:  # (batch, steps): mean over the tokens
            losses = tf.reduce_mean(losses, axis=1)
        return losses

    def _make_step(self):
        tf = self.tf
        model, optimizer, strategy = self.model, self.optimizer, self.strategy
        scale = float(self.global_batch)

        def replica_step(inputs, labels):
            with tf.GradientTape() as tape:
                logits = model(inputs, training=True)
                loss = tf.reduce_sum(self._per_sample(labels, logits)) / scale
            variables = model.trainable_variables
            gradients = tape.gradient(loss, variables)
            optimizer.apply_gradients(zip(gradients, variables))
            return loss

        @tf.function
        def step(inputs, labels):
            losses = strategy.run(replica_step, args=(inputs, labels))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, losses,
                                   axis=None)
        return step

    def step(self, batch):
        tf = self.tf
        xs = [self.train_x[dataparallel.shard(batch, r, self.workers)]
              for r in range(self.workers)]
        ys = [self.train_y[dataparallel.shard(batch, r, self.workers)]
              for r in range(self.workers)]

        def part(values):
            return lambda context: tf.constant(
                values[context.replica_id_in_sync_group])
        inputs = self.strategy.experimental_distribute_values_from_function(
            part(xs))
        labels = self.strategy.experimental_distribute_values_from_function(
            part(ys))
        try:
            loss = self._step(inputs, labels)
        except tf.errors.UnavailableError as exc:
            if self.cluster is None:
                raise
            # Its text is "Graph execution error:" and a node name.
            raise RuntimeError(
                "a TensorFlow collective across nodes failed: a peer is "
                "unavailable (lost or unreachable; coordination service at "
                "{}:{}): {}".format(self.cluster["coordinator"],
                                    self.cluster["port"],
                                    type(exc).__name__))
        self._sync()
        return float(loss.numpy())

    def evaluate(self):
        tf = self.tf
        total, correct, count = 0.0, 0, 0
        chunk = 1024
        for start in range(0, len(self.test_y), chunk):
            inputs = self.test_x[start:start + chunk]
            labels = self.test_y[start:start + chunk]
            logits = self.model(inputs, training=False)
            total += float(tf.reduce_sum(self._per_sample(labels, logits)))
            predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
            correct += int(tf.reduce_sum(tf.cast(tf.equal(predicted, labels),
                                                 tf.int32)))
            count += labels.size
        # Accuracy counts tokens for the LSTM, samples otherwise; the loss
        # is per sample (per-token mean within a sample).
        return total / len(self.test_y), correct / float(count)


# --- across nodes -----------------------------------------------------------

def worker_ports(cluster):
    """Each node's TensorFlow server port: the base port (node 0's holds
    the coordination service); nodes that share an address (tests on one
    host) take consecutive ones."""
    shared = len(set(cluster["addresses"])) < len(cluster["addresses"])
    return [cluster["port"] + (rank if shared else 0)
            for rank in range(cluster["nodes"])]


def cluster_workers(cluster, environ=None):
    """(the workers' "address:port" in task order, this node's task id)
    from Slurm's step variables when they are there (SlurmClusterResolver
    reads them), else from the cluster object alone."""
    environ = os.environ if environ is None else environ
    ports = worker_ports(cluster)
    workers = ["{}:{}".format(a, p) for a, p in zip(cluster["addresses"],
                                                    ports)]
    if "SLURM_PROCID" in environ and "SLURM_STEP_NODELIST" in environ:
        return _slurm_workers(cluster, ports, workers), cluster["node_rank"]
    return workers, cluster["node_rank"]


def _slurm_workers(cluster, ports, workers):
    """SlurmClusterResolver's view of the step, checked against the
    cluster object: the same hosts, one task per node, and this task at
    this node's rank. Its node names become the cluster's addresses (a
    container may not resolve them). Its order is Python's sort of the
    node names, Slurm's is natural (n2 before n10): a disagreement is an
    error, not a silent swap of ranks."""
    tf = backend._tf()
    # Its GPU bookkeeping lists a task only where it can give it GPUs
    # (none on a CPU node, and 0 per task divides by zero): one "GPU" per
    # task, never applied (auto_set_gpu off; Slurm and the runtime decide
    # what a task sees).
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        port_base=ports[0], gpus_per_node=1, gpus_per_task=1,
        auto_set_gpu=False)
    spec = resolver.cluster_spec().as_dict().get("worker", [])
    hosts = [entry.rsplit(":", 1)[0] for entry in spec]
    task = resolver.get_task_info()[1]
    if hosts != cluster["hosts"] or task != cluster["node_rank"]:
        raise HarnessError(
            "Slurm's step (SlurmClusterResolver: workers {}, this task {}) "
            "does not match the cluster object (hosts {}, node_rank {}): "
            "one task per node, nodes in rank order".format(
                hosts, task, cluster["hosts"], cluster["node_rank"]))
    return workers


def _multi_worker(tf, plan):
    """MultiWorkerMirroredStrategy for this node's worker, every wait
    bounded by the cluster's timeout_s."""
    cluster = plan["cluster"]
    workers, task = cluster_workers(cluster)
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": task}})
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    timeout_ms = int(cluster["timeout_s"] * 1000)
    _bound_coordination(tf, resolver, timeout_ms)
    implementations = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        # gRPC ring all-reduce on CPUs; NCCL between GPUs.
        implementation=implementations.NCCL if plan["device"] == "gpu"
        else implementations.RING,
        timeout_seconds=float(cluster["timeout_s"]))
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options)
    except tf.errors.OpError as exc:
        # TensorFlow's message runs to dozens of lines; its first says it.
        reason = str(exc).strip().splitlines()[0]
        if "Could not start gRPC server" in reason:
            # gRPC does not say why; the usual cause is checked here.
            host, port = workers[task].rsplit(":", 1)
            taken = children.port_taken(host, int(port))
            reason += ": " + taken if taken else ""
        raise RuntimeError(
            "TensorFlow's cluster rendezvous (coordination service at {}, "
            "{} workers, {:g} s timeout) failed: {}".format(
                workers[0], len(workers), cluster["timeout_s"], reason))


def _bound_coordination(tf, resolver, timeout_ms):
    """The coordination service as MultiWorkerMirroredStrategy would
    configure it, with its waits bounded: registration of all workers
    (otherwise forever), heartbeats and the shutdown barrier. TensorFlow
    internals (2.x with the coordination service); without them the
    strategy's defaults stay."""
    try:
        from tensorflow.python.eager import context
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.compiler.xla.tsl.protobuf import \
            coordination_config_pb2
    except ImportError:
        return
    spec = resolver.cluster_spec()
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=multi_worker_util.coordination_leader(spec),
        cluster_register_timeout_in_ms=timeout_ms,
        heartbeat_timeout_in_ms=timeout_ms,
        shutdown_barrier_timeout_in_ms=timeout_ms,
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(
            name="worker", num_tasks=spec.num_tasks("worker"))])
    config = context.context().coordination_service
    if "cluster_register_with_barrier" in [
            f.name for f in config.DESCRIPTOR.fields]:
        # Registration as a barrier of all tasks, under the timeout above;
        # without it the leader waits for the others with no limit.
        config.cluster_register_with_barrier = True


def train(plan, data, log):
    return dataparallel.train_here(_Trainer(plan, data), plan, data)
