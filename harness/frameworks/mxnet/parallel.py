"""MXNet data parallelism: Gluon with one context per worker in one process
(mx.cpu(0..N-1) on the CPU, mx.gpu(0..N-1) on GPUs), the global batch cut
with gluon.utils.split_and_load, and gradients summed by a kvstore: 'local'
on the CPU, 'device' on GPUs (the paper's setting).

The model comes from the MXNet backend's build_model, initialised on every
context from one draw. Every context's loss is per sample; backward sums
the gradients of its part, the kvstore sums them over the contexts, and
Trainer.step(global batch) divides by the global batch: the update that
dataparallel describes.
"""
from .. import arrays, dataparallel
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

PROCESS_PER_WORKER = False
MECHANISM = {
    "cpu": "Gluon, contexts mx.cpu(0..N-1) in one process, split_and_load, "
           "kvstore 'local' (contexts share the cores)",
    "gpu": "Gluon, contexts mx.gpu(0..N-1), split_and_load, kvstore 'device'",
}


class _Trainer(dataparallel.Trainer):
    # global_losses: the step already sums over the contexts.

    def __init__(self, plan, data):
        # Before MXNet loads: it reads its thread settings at import.
        backend.configure(plan["threads"], plan["device"], plan["seed"])
        super(_Trainer, self).__init__(plan, backend)
        mx = backend._mx()
        self.mx = mx
        gpu = plan["device"] == "gpu"
        self.contexts = [mx.gpu(i) if gpu else mx.cpu(i)
                         for i in range(self.workers)]
        (train_x, self.train_y), (test_x, self.test_y) = arrays.train_test(
            data, self.network)
        # Word ids travel as float32 (exact below 2**24), the type Gluon's
        # Embedding and loss take; labels too.
        self.train_x = train_x.astype("float32")
        self.test_x = test_x.astype("float32")
        mx.random.seed(plan["seed"])
        self.model = backend.hybridize(backend.build_model(self.network,
                                                           self.contexts))
        self.parameters = backend.count_parameters(self.model)
        self.loss = backend.loss_block()
        self.trainer = mx.gluon.Trainer(
            self.model.collect_params(), "sgd",
            {"learning_rate": self.network.learning_rate,
             "momentum": self.network.momentum},
            kvstore="device" if gpu else "local")

    def _split(self, values):
        # split_and_load cuts axis 0 into equal contiguous parts in context
        # order: part r is dataparallel.shard(batch, r, workers).
        return self.mx.gluon.utils.split_and_load(
            self.mx.nd.array(values, dtype="float32"), self.contexts,
            even_split=True)

    def step(self, batch):
        mx = self.mx
        inputs = self._split(self.train_x[batch])
        labels = self._split(self.train_y[batch].astype("float32"))
        with mx.autograd.record():
            losses = [self.loss(self.model(x), y)
                      for x, y in zip(inputs, labels)]
        for loss in losses:
            loss.backward()
        self.trainer.step(self.global_batch)
        # The engine is asynchronous: the iteration ends when the updates on
        # every context have run, not when the loss alone is ready.
        mx.nd.waitall()
        return sum(float(l.sum().asscalar()) for l in losses) / \
            self.global_batch

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


def _pad(values, size):
    np = arrays._np()
    extra = np.zeros((size - len(values),) + values.shape[1:],
                     dtype=values.dtype)
    return np.concatenate([values, extra])


def train(plan, data, log):
    return dataparallel.train_here(_Trainer(plan, data), plan, data)
