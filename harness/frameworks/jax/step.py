"""The JAX backend's training step: Optax's SGD, the loss, fp16 loss
scaling and the one jitted function of loss, gradient and update (the
backend module's docstring says why)."""
from .load import _jax, _np, _optax

# Mixed precision: the compute type of the layers (jnp dtype names).
COMPUTE_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def make_optimizer(network):
    """Plain SGD with the network's learning rate and momentum. Optax's
    momentum (t = g + m t; w -= lr t) is PyTorch's."""
    momentum = network.momentum or None
    return _optax().sgd(network.learning_rate, momentum=momentum)


def loss(logits, labels):
    """Mean softmax cross-entropy over samples, or over tokens when logits
    are (batch, steps, classes)."""
    return _optax().softmax_cross_entropy_with_integer_labels(
        logits.reshape((-1, logits.shape[-1])), labels.reshape(-1)).mean()


class LossScale(object):
    """Dynamic loss scaling for fp16, with torch.amp.GradScaler's constants:
    the loss is multiplied by `scale` before differentiation and the
    gradients divided by it; a step whose gradients are not all finite is
    skipped (weights, optimizer state and batch-norm statistics kept) and
    halves the scale; GROWTH_INTERVAL finite steps in a row double it."""
    INITIAL = 2.0 ** 16
    GROWTH_INTERVAL = 2000
    DESCRIPTION = ("dynamic (in the jitted step: initial 2^16, halved and the "
                   "step skipped on non-finite gradients, doubled after 2000 "
                   "finite steps; torch.amp.GradScaler's constants)")

    @staticmethod
    def init():
        # numpy: a jnp conversion would be compiled, eagerly, per cell.
        np = _np()
        return {"scale": np.asarray(LossScale.INITIAL, np.float32),
                "good_steps": np.asarray(0, np.int32)}

    @staticmethod
    def update(scaler, finite):
        jnp = _jax().numpy
        good = jnp.where(finite, scaler["good_steps"] + 1, 0)
        grow = good >= LossScale.GROWTH_INTERVAL
        scale = jnp.where(finite, jnp.where(grow, scaler["scale"] * 2.0,
                                            scaler["scale"]),
                          jnp.maximum(scaler["scale"] * 0.5, 1.0))
        return {"scale": scale, "good_steps": jnp.where(grow, 0, good)}


def _cast_floating(tree, dtype):
    """The tree's floating-point leaves cast to `dtype` (integer token ids
    stay as they are)."""
    jax = _jax()
    jnp = jax.numpy
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating)
        else a, tree)


def make_train_step(apply, optimizer, donate=True, precision="default"):
    """(params, state, opt_state, inputs, labels) -> (params, state,
    opt_state, loss), jitted: forward, gradient and update in one XLA
    program. `donate`: the old parameters' buffers are reused for the new.
    `precision` "bf16"/"fp16": mixed precision (the module's docstring);
    for fp16 `opt_state` is (the optimizer's state, LossScale.init())."""
    jax = _jax()
    jnp = jax.numpy
    optax = _optax()
    compute = COMPUTE_DTYPES.get(precision)

    def objective(params, state, inputs, labels):
        if compute is not None:
            params, inputs = _cast_floating((params, inputs),
                                            jnp.dtype(compute))
        logits, state = apply(params, state, inputs, True)
        # Softmax and loss in FP32 (a no-op without mixed precision).
        return loss(logits.astype(jnp.float32), labels), state

    def step(params, state, opt_state, inputs, labels):
        (value, state), grads = jax.value_and_grad(objective, has_aux=True)(
            params, state, inputs, labels)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), state, opt_state, value

    def scaled_step(params, state, opt_state, inputs, labels):
        inner, scaler = opt_state

        def scaled(params_):
            value, new_state = objective(params_, state, inputs, labels)
            return value * scaler["scale"], (value, new_state)

        (_scaled, (value, new_state)), grads = jax.value_and_grad(
            scaled, has_aux=True)(params)
        grads = jax.tree_util.tree_map(lambda g: g / scaler["scale"], grads)
        finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(g)) for g in
                                      jax.tree_util.tree_leaves(grads)]))
        updates, new_inner = optimizer.update(grads, inner, params)
        new_params = optax.apply_updates(params, updates)
        keep = lambda new, old: jax.tree_util.tree_map(  # noqa: E731
            lambda n, o: jnp.where(finite, n, o), new, old)
        return (keep(new_params, params), keep(new_state, state),
                (keep(new_inner, inner), LossScale.update(scaler, finite)),
                value)

    return jax.jit(scaled_step if precision == "fp16" else step,
                   donate_argnums=(0, 1, 2) if donate else ())

