"""CNTK data parallelism: the data-parallel distributed learner
(C.train.distributed.data_parallel_distributed_learner) with 32-bit
gradients, i.e. plain SGD, not the 1-bit SGD of the 2016 scripts (which
changes convergence); one MPI process per worker under mpirun.

Runs in the CNTK image (Python 3.6, OpenMPI 1.10's mpirun). Two CNTK
behaviours it relies on, both shown by tests/backends/test_converge_training.py
there, for rank 0 (its curve with 2 workers equals the 1-worker curve to
1e-7):
- the distributed learner sums gradients and sample counts over the
  workers, so a learning rate given per global minibatch
  (learning_parameter_schedule(lr, minibatch_size=global samples)) makes the
  update the global batch's mean gradient, as in the other frameworks;
- DataParallelDistributedLearner::Update aggregates the training loss with
  the gradients, so previous_minibatch_loss_average is the global batch's
  loss on every worker (the epoch loop's decisions then agree).

Run as (by train(), under mpirun only):
    python -m harness.frameworks.cntk.parallel --plan PLAN.json --out CURVES.json
"""
import os
import subprocess
import sys

from .. import arrays, backends, children, dataparallel
from . import backend
from .backend import DEVICES, NAME, gpu_count  # noqa: F401 (the interface)

MECHANISM = {
    "cpu": "data_parallel_distributed_learner, 32-bit gradients (plain "
           "SGD, not 1-bit), one MPI process per worker (mpirun)",
    "gpu": "data_parallel_distributed_learner, 32-bit gradients (plain "
           "SGD, not 1-bit), one MPI process per GPU (mpirun)",
}
# Across nodes every node runs its own harness (the Slurm side starts one per
# node), but an MPI job is one launch: mpirun would have to start the other
# nodes' ranks itself (over ssh, which the image has no daemon or keys for,
# or through Slurm's srun, which is not in the image and needs the cluster's
# Slurm configuration), or srun would have to start the ranks directly with
# PMI, which Ubuntu 16.04's Open MPI 1.10.2 package is not known to be built
# with (not checked: no image built here). docs/multinode.md.
_MULTI_NODE = ("CNTK's data parallelism is one MPI job started by mpirun "
              "(Open MPI 1.10 in its image), which reaches other nodes only "
              "over ssh or Slurm's srun, neither of which is in the CNTK "
              "container; one harness per node cannot join one MPI job")
CAPABILITIES = backends.parallel_capabilities(
    process_per_worker=True,
    multi_node=_MULTI_NODE)
_MODULE = "harness.frameworks.cntk.parallel"


def _mpirun(command, env):
    process = subprocess.Popen(command, env=env, start_new_session=True,
                               preexec_fn=children.die_with_this_process())
    try:
        status = process.wait()
    except BaseException:
        # SIGTERM from the host's timeout, or Ctrl-C: SIGTERM to mpirun and
        # its ranks (they write the curves so far), then SIGKILL.
        children.stop(process)
        raise
    if status != 0:
        raise RuntimeError("mpirun exited with status {} (see the log)"
                           .format(status))


def train(plan, data, log):
    """Run the workers under mpirun and return rank 0's curves."""
    command = ["mpirun", "-np", str(plan["workers"]), "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")  # containers run as root
    command += [sys.executable, "-m", _MODULE]
    return dataparallel.launch(plan, log, command, _mpirun,
                               prefix="dlrepro-mpi-")


class _Trainer(dataparallel.Trainer):
    # global_losses: already the global batch's (see the module's doc).

    def __init__(self, plan, data):
        super(_Trainer, self).__init__(plan, backend)
        C = backend._cntk()
        self.C = C
        self.distributed = C.train.distributed
        self.rank = self.distributed.Communicator.rank()
        self.workers = self.distributed.Communicator.num_workers()
        if plan["device"] == "gpu":
            C.device.try_set_default_device(C.device.gpu(self.rank))
        backend.configure(plan["threads"], plan["device"], plan["seed"])
        self.tokens = self.network.input_dtype == "int64"
        (self.train_x, self.train_y), (self.test_x, self.test_y) = \
            arrays.train_test(data, self.network)
        per_worker = plan["global_batch_size"] // self.workers
        self.model = backend.build_model(self.network, per_worker,
                                         plan["device"], plan["seed"])
        self.features = self.model.arguments[0]
        self.labels = backend.input_variables(self.network)[1]
        self.parameters = backend.count_parameters(self.model)
        self.loss = C.cross_entropy_with_softmax(self.model, self.labels)
        self.error = C.classification_error(self.model, self.labels)
        steps = self.network.input_shape[0] if self.tokens else 1
        learner = backend.learner(self.model, self.network,
                                  plan["global_batch_size"] * steps)
        # num_quantization_bits=32: full-precision aggregation (plain SGD).
        learner = self.distributed.data_parallel_distributed_learner(
            learner, num_quantization_bits=32, distributed_after=0)
        # barrier() is an instance method of the learner's communicator
        # (Communicator's rank() and num_workers() are static).
        self.communicator = learner.communicator()
        self.trainer = C.Trainer(self.model, (self.loss, self.error),
                                 [learner])

    def _values(self, inputs, targets):
        C = self.C
        np = arrays._np()
        if self.tokens:
            return {self.features: C.Value.one_hot(
                        inputs.tolist(), self.network.classes),
                    self.labels: C.Value.one_hot(
                        targets.tolist(), self.network.classes)}
        from scipy import sparse  # CNTK's own dependency
        count = targets.shape[0]
        one_hot = sparse.csr_matrix(
            (np.ones(count, dtype=np.float32), (np.arange(count), targets)),
            shape=(count, self.network.classes))
        return {self.features: np.ascontiguousarray(inputs),
                self.labels: one_hot}

    def step(self, batch):
        mine = dataparallel.shard(batch, self.rank, self.workers)
        self.trainer.train_minibatch(self._values(self.train_x[mine],
                                                  self.train_y[mine]))
        return float(self.trainer.previous_minibatch_loss_average)

    def evaluate(self):
        result = (None, None)
        if self.rank == 0:
            total, wrong, count = 0.0, 0.0, 0
            chunk = 256
            for start in range(0, len(self.test_y), chunk):
                inputs = self.test_x[start:start + chunk]
                targets = self.test_y[start:start + chunk]
                values = self._values(inputs, targets)
                tokens = targets.size
                total += float(self.loss.eval(values).sum()) if not \
                    self.tokens else float(sum(
                        v.sum() for v in self.loss.eval(values)))
                wrong += float(self.trainer.test_minibatch(values)) * tokens
                count += tokens
            result = (total / count, 1.0 - wrong / count)
        self.communicator.barrier()
        return result


def _worker(plan, out_path):
    data = dataparallel.load_data(plan["data"], plan["seed"])
    trainer = _Trainer(plan, data)
    try:
        curves = dataparallel.run_epochs(
            trainer, plan, data.train.count,
            progress=dataparallel.worker_progress(out_path, plan,
                                                  trainer.rank == 0))
        if trainer.rank == 0:
            dataparallel.write_curves(out_path, curves, trainer, plan)
    finally:
        trainer.distributed.Communicator.finalize()


def main(argv=None):
    return dataparallel.worker_main(_MODULE, _worker, argv)


if __name__ == "__main__":
    sys.exit(main())
