"""TensorFlow data parallelism: tf.distribute.MirroredStrategy, one replica
per worker in one process; on the CPU over N logical CPU devices
(tf.config.set_logical_device_configuration), on GPUs over N GPUs.

The model comes from the TensorFlow backend's build_model, created under
the strategy's scope so that every replica holds a mirrored copy. Each
replica's loss is its part's summed cross-entropy divided by the global
batch, and the optimizer sums the replicas' gradients: the update that
dataparallel describes.
"""
from .. import arrays, dataparallel
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

PROCESS_PER_WORKER = False
MECHANISM = {
    "cpu": "tf.distribute.MirroredStrategy over N logical CPU devices in "
           "one process (replicas share the cores)",
    "gpu": "tf.distribute.MirroredStrategy over N GPUs (NCCL all-reduce)",
}


def _devices(tf, device, workers):
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
        devices = _devices(tf, plan["device"], self.workers)
        backend.configure(plan["threads"], plan["device"], plan["seed"])
        self.fmt = backend.data_format(plan["device"])
        (train_x, train_y), (test_x, test_y) = arrays.train_test(
            data, self.network)
        int_inputs = self.network.input_dtype == "int64"
        self.train_x = _to_layout(train_x, self.fmt).astype(
            "int32" if int_inputs else "float32")
        self.test_x = _to_layout(test_x, self.fmt).astype(self.train_x.dtype)
        self.train_y = train_y.astype("int32")
        self.test_y = test_y.astype("int32")
        self.strategy = tf.distribute.MirroredStrategy(devices=devices)
        with self.strategy.scope():
            self.model = backend.build_model(self.network, self.fmt)
            self.optimizer = backend.make_optimizer(self.network)
            build = getattr(self.optimizer, "build", None)
            if build is not None:
                # Keras >= 2.11 makes the slots here, not in the traced step.
                build(self.model.trainable_variables)
        self.parameters = backend.parameter_count(self.model)
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
        loss = self._step(inputs, labels)
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


def train(plan, data, log):
    return dataparallel.train_here(_Trainer(plan, data), plan, data)
