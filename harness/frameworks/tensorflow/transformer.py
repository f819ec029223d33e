"""TensorFlow's translation of harness.networks' Transformer: one Keras
layer over tf ops. TensorFlow has no fused attention op of its own, so
attention is its matrix products, a causal mask and a softmax, fused by
Grappler (or XLA with `compile xla`) inside the step's tf.function."""
import math

from .load import _tf

ATTENTION = ("tf.matmul, causal mask, tf.nn.softmax, tf.matmul (no fused "
             "attention op in TensorFlow) inside the step's tf.function")

_CLASSES = {}


def _layer_norm(tf, x, gamma, beta, eps):
    # Statistics in FP32 whatever the compute type, as mixed-precision
    # policies keep normalisation.
    dtype, x = x.dtype, tf.cast(x, tf.float32)
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = (x - mean) * tf.math.rsqrt(var + eps) * tf.cast(gamma, tf.float32) \
        + tf.cast(beta, tf.float32)
    return tf.cast(y, dtype)


def _gelu(tf, x):
    # The exact (erf) gelu, written out: tf.nn.gelu is 2.4 and newer.
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


def _classes():
    # Why this is long: the Keras layer class is defined inside a function,
    # on first use, because subclassing a Keras layer imports TensorFlow.
    if _CLASSES:
        return _CLASSES
    tf = _tf()

    class Transformer(tf.keras.layers.Layer):
        def __init__(self, spec, **kwargs):
            super(Transformer, self).__init__(**kwargs)
            self.spec = spec

        def _weight(self, name, shape, initializer):
            return self.add_weight(name=name, shape=shape,
                                   initializer=initializer, trainable=True)

        def _dense(self, name, inputs, units):
            return (self._weight(name + "_w", (inputs, units),
                                 "glorot_uniform"),
                    self._weight(name + "_b", (units,), "zeros"))

        def _norm(self, name):
            d = self.spec.dim
            return (self._weight(name + "_gamma", (d,), "ones"),
                    self._weight(name + "_beta", (d,), "zeros"))

        def build(self, input_shape):
            s = self.spec
            table = tf.keras.initializers.RandomUniform(-0.05, 0.05)
            self.tokens = self._weight("tokens", (s.vocab, s.dim), table)
            self.positions = self._weight("positions", (s.context, s.dim),
                                          table)
            self.blocks = []
            for i in range(s.layers):
                name = "block{}_".format(i)
                self.blocks.append({
                    "norm_1": self._norm(name + "norm_1"),
                    "qkv": self._dense(name + "qkv", s.dim, 3 * s.dim),
                    "out": self._dense(name + "out", s.dim, s.dim),
                    "norm_2": self._norm(name + "norm_2"),
                    "up": self._dense(name + "up", s.dim, s.ff),
                    "down": self._dense(name + "down", s.ff, s.dim)})
            self.norm = self._norm("norm")
            super(Transformer, self).build(input_shape)

        def _attention(self, h, b):
            s = self.spec
            steps, per_head = tf.shape(h)[1], s.dim // s.heads
            x = _layer_norm(tf, h, b["norm_1"][0], b["norm_1"][1], s.eps)
            qkv = tf.matmul(x, b["qkv"][0]) + b["qkv"][1]
            qkv = tf.reshape(qkv, [-1, steps, 3, s.heads, per_head])
            # -> (3, batch, heads, steps, per_head)
            q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))
            scores = tf.matmul(q, k, transpose_b=True) * (
                1.0 / math.sqrt(per_head))
            future = 1.0 - tf.linalg.band_part(
                tf.ones([steps, steps], scores.dtype), -1, 0)
            scores = scores + future * tf.cast(-1e9 if scores.dtype ==
                                               tf.float32 else -3e4,
                                               scores.dtype)
            att = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
            att = tf.reshape(tf.transpose(att, [0, 2, 1, 3]),
                             [-1, steps, s.dim])
            return tf.matmul(att, b["out"][0]) + b["out"][1]

        def call(self, tokens):
            s = self.spec
            steps = tf.shape(tokens)[1]
            h = tf.gather(self.tokens, tokens) + self.positions[:steps]
            for b in self.blocks:
                h = h + self._attention(h, b)
                x = _layer_norm(tf, h, b["norm_2"][0], b["norm_2"][1], s.eps)
                up = _gelu(tf, tf.matmul(x, b["up"][0]) + b["up"][1])
                h = h + tf.matmul(up, b["down"][0]) + b["down"][1]
            h = _layer_norm(tf, h, self.norm[0], self.norm[1], s.eps)
            # Tied: the output projection is the token table, no bias.
            return tf.matmul(h, tf.cast(self.tokens, h.dtype),
                             transpose_b=True)

    _CLASSES["Transformer"] = Transformer
    return _CLASSES


def layer(r):
    """The Keras layer for resolved Transformer layer `r`."""
    return _classes()["Transformer"](r.layer)
