"""MXNet's translation of harness.networks' Transformer: Gluon
HybridBlocks, hybridized with the rest of the model. Attention is
batch_dot, a causal mask and softmax (MXNet 1.9's fused
interleaved_matmul_selfatt_* ops take no causal mask and need a layout
of their own for q, k and v)."""
import math

from .load import _mx

ATTENTION = ("batch_dot, causal mask, softmax, batch_dot in the hybridized "
             "Gluon graph")

_BLOCKS = {}


def _glorot():
    # Glorot-uniform, as layers._glorot says.
    return _mx().init.Xavier(rnd_type="uniform", factor_type="avg",
                             magnitude=3)


def _dense(units, inputs):
    return _mx().gluon.nn.Dense(units, flatten=False, in_units=inputs,
                                weight_initializer=_glorot(),
                                bias_initializer="zeros")


def _blocks():
    # Why this is long: the two HybridBlock classes are defined inside one
    # function, on first use: gluon must not be imported with the module.
    if _BLOCKS:
        return _BLOCKS
    gluon = _mx().gluon
    nn = gluon.nn

    class Block(gluon.HybridBlock):
        def __init__(self, layer, steps, **kwargs):
            super(Block, self).__init__(**kwargs)
            self.heads, self.steps = layer.heads, steps
            self.scale = 1.0 / math.sqrt(layer.dim // layer.heads)
            with self.name_scope():
                self.norm_1 = nn.LayerNorm(epsilon=layer.eps,
                                           in_channels=layer.dim)
                self.qkv = _dense(3 * layer.dim, layer.dim)
                self.out = _dense(layer.dim, layer.dim)
                self.norm_2 = nn.LayerNorm(epsilon=layer.eps,
                                           in_channels=layer.dim)
                self.up = _dense(layer.ff, layer.dim)
                self.down = _dense(layer.dim, layer.ff)

        def _attention(self, F, x):
            qkv = self.qkv(self.norm_1(x))
            # (batch, steps, 3 d) -> 3 x (batch * heads, steps, d / heads)
            qkv = F.reshape(qkv, shape=(0, 0, 3, self.heads, -1))
            qkv = F.reshape(F.transpose(qkv, axes=(2, 0, 3, 1, 4)),
                            shape=(3, -3, 0, 0))
            q, k, v = F.split(qkv, num_outputs=3, axis=0, squeeze_axis=True)
            scores = F.batch_dot(q, k, transpose_b=True) * self.scale
            where = F.arange(0, self.steps)
            future = F.broadcast_greater(F.reshape(where, shape=(1, -1)),
                                         F.reshape(where, shape=(-1, 1)))
            scores = F.broadcast_add(scores,
                                     F.expand_dims(future, 0) * -1e4)
            att = F.batch_dot(F.softmax(scores, axis=-1), v)
            att = F.reshape(att, shape=(-4, -1, self.heads, 0, 0))
            att = F.reshape(F.transpose(att, axes=(0, 2, 1, 3)),
                            shape=(0, 0, -3))
            return self.out(att)

        def hybrid_forward(self, F, x):
            x = x + self._attention(F, x)
            up = F.LeakyReLU(self.up(self.norm_2(x)), act_type="gelu")
            return x + self.down(up)

    class Transformer(gluon.HybridBlock):
        def __init__(self, layer, steps, **kwargs):
            super(Transformer, self).__init__(**kwargs)
            self.layer, self.steps = layer, steps
            table = _mx().init.Uniform(0.05)
            with self.name_scope():
                self.tokens = self.params.get(
                    "tokens", shape=(layer.vocab, layer.dim), init=table)
                self.positions = self.params.get(
                    "positions", shape=(layer.context, layer.dim), init=table)
                self.blocks = nn.HybridSequential()
                for _ in range(layer.layers):
                    self.blocks.add(Block(layer, steps))
                self.norm = nn.LayerNorm(epsilon=layer.eps,
                                         in_channels=layer.dim)

        def hybrid_forward(self, F, x, tokens, positions):
            layer = self.layer
            h = F.Embedding(x, tokens, input_dim=layer.vocab,
                            output_dim=layer.dim)
            where = F.slice_axis(positions, axis=0, begin=0, end=self.steps)
            h = self.blocks(F.broadcast_add(h, F.expand_dims(where, 0)))
            # Tied: the output projection is the token table, no bias.
            return F.FullyConnected(self.norm(h), tokens, no_bias=True,
                                    num_hidden=layer.vocab, flatten=False)

    _BLOCKS.update(Transformer=Transformer)
    return _BLOCKS


def block(r):
    """The Gluon block for resolved Transformer layer `r`."""
    return _blocks()["Transformer"](r.layer, r.in_shape[0])
