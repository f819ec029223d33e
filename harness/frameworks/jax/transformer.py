"""JAX's translation of harness.networks' Transformer, in plain jax.numpy
with attention by jax.nn.dot_product_attention, JAX's fused path (cuDNN's
flash attention on the GPU where XLA can use it, XLA's own otherwise)."""
from ...errors import Unsupported
from .load import _jax

ATTENTION = ("jax.nn.dot_product_attention (is_causal=True, "
             "implementation=None: cuDNN's fused kernel where it applies, "
             "else XLA's)")


def _layer_norm(jnp, p, x, eps):
    # Statistics in FP32 whatever the compute type, as autocast and jmp's
    # policies keep normalisation; the output goes on in the input's type.
    dtype, x = x.dtype, x.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / jnp.sqrt(var + eps) * p["gamma"].astype(jnp.float32) \
        + p["beta"].astype(jnp.float32)
    return y.astype(dtype)


def _block_params(layers, key, d, ff):
    keys = key.spawn(4)
    return {"norm_1": {"gamma": layers._ones((d,)), "beta": layers._zeros((d,))},
            "w_qkv": layers._glorot(keys[0], (d, 3 * d), d, 3 * d),
            "b_qkv": layers._zeros((3 * d,)),
            "w_o": layers._glorot(keys[1], (d, d), d, d),
            "b_o": layers._zeros((d,)),
            "norm_2": {"gamma": layers._ones((d,)), "beta": layers._zeros((d,))},
            "w_1": layers._glorot(keys[2], (d, ff), d, ff),
            "b_1": layers._zeros((ff,)),
            "w_2": layers._glorot(keys[3], (ff, d), ff, d),
            "b_2": layers._zeros((d,))}


def build(r, layers):
    """A layers.Layer for resolved Transformer layer `r` (`layers`: the
    JAX backend's layers module, for its initialisers)."""
    jax = _jax()
    jnp = jax.numpy
    if not hasattr(jax.nn, "dot_product_attention"):
        raise Unsupported("JAX {} predates jax.nn.dot_product_attention "
                          "(0.4.31 and newer)".format(jax.__version__))
    layer = r.layer
    d, heads = layer.dim, layer.heads

    def init(key):
        keys = key.spawn(layer.layers + 2)
        return {"tokens": layers._uniform(keys[0], (layer.vocab, d), 0.05),
                "positions": layers._uniform(keys[1], (layer.context, d),
                                             0.05),
                "blocks": [_block_params(layers, k, d, layer.ff)
                           for k in keys[2:]],
                "norm": {"gamma": layers._ones((d,)),
                         "beta": layers._zeros((d,))}}, {}

    def block(p, h):
        batch, steps = h.shape[0], h.shape[1]
        qkv = _layer_norm(jnp, p["norm_1"], h, layer.eps) @ p["w_qkv"] \
            + p["b_qkv"]
        # (batch, steps, 3 d) -> q, k, v of (batch, steps, heads, d/heads)
        q, k, v = jnp.split(qkv.reshape(batch, steps, 3, heads, d // heads),
                            3, axis=2)
        att = jax.nn.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0],
                                           is_causal=True)
        h = h + att.reshape(batch, steps, d) @ p["w_o"] + p["b_o"]
        up = _layer_norm(jnp, p["norm_2"], h, layer.eps) @ p["w_1"] + p["b_1"]
        return h + jax.nn.gelu(up, approximate=False) @ p["w_2"] + p["b_2"]

    def apply(p, tokens):
        h = p["tokens"][tokens] + p["positions"][:tokens.shape[1]]
        for block_params in p["blocks"]:
            h = block(block_params, h)
        # Tied: the output projection is the token table, no bias.
        return _layer_norm(jnp, p["norm"], h, layer.eps) @ p["tokens"].T

    return layers._stateless(apply, init)
