"""The decoder-only transformer's part of the network description: the
layer kind, its parameter and multiply-accumulate counts, and sequences
shorter than its context asked for by name (harness.networks holds the
networks themselves)."""
from collections import namedtuple

from .errors import HarnessError

# A decoder-only transformer (GPT-2's layout), token ids in, logits out, as
# one kind (like LSTM's stack) because its input and output embeddings are
# one tied matrix that every backend must share within one translator:
#   h = E[tokens] + P[0:steps]             E: vocab x dim, P: context x dim
#   `layers` times, pre-LayerNorm:
#     h = h + W_o(attention(LN_1(h)))      causal, `heads` heads of dim/heads,
#                                          scores scaled by 1/sqrt(dim/heads);
#                                          W_qkv: dim -> 3 dim (q, k, v side
#                                          by side), W_o: dim -> dim
#     h = h + W_2(gelu(W_1(LN_2(h))))      W_1: dim -> ff, W_2: ff -> dim,
#                                          gelu the exact (erf) one
#   logits = LN_f(h) @ E^T                 no output bias
# Every dense layer has a bias. Initial values: E and P uniform(-0.05,
# 0.05) like every embedding here; dense weights Glorot-uniform, biases
# zero; layer-norm gamma 1, beta 0, epsilon `eps`. (GPT-2 draws N(0, 0.02)
# and uses the tanh approximation of gelu; the description keeps the
# conventions every network here shares and the gelu every framework has.)
Transformer = namedtuple("Transformer",
                         "vocab dim context layers heads ff eps")


# "gpt-small@256": gpt-small over sequences of 256 tokens (its weights,
# position table included, unchanged). Only for networks whose one layer is
# a Transformer; a length above its context is refused.
SEQUENCE_SEPARATOR = "@"


def transformer_parameters(layer):
    """Token and position tables (the output shares the token table), per
    block two layer norms, W_qkv, W_o, W_1, W_2 with biases, the final
    layer norm."""
    d, ff = layer.dim, layer.ff
    block = (2 * d + (d * 3 * d + 3 * d) + (d * d + d) + 2 * d +
             (d * ff + ff) + (ff * d + d))
    return (layer.vocab * d + layer.context * d + layer.layers * block +
            2 * d)


def transformer_macs(layer, steps):
    """Multiply-accumulates of one sequence of `steps` tokens: per block
    and token the four dense products (4 d^2 + 2 d ff) and attention's two
    (scores q.k and the weighted sum of values: d per key each), every key
    counted, the causal mask's zeros too (the frameworks' plain attention
    computes them; a causal kernel may skip about half), then the tied
    output d x vocab per token."""
    d = layer.dim
    dense = 4 * d * d + 2 * d * layer.ff
    attention = 2 * steps * d
    return steps * (layer.layers * (dense + attention) + d * layer.vocab)


def attention_shapes(layer, steps):
    """Tensors a block makes per sequence that can be larger than its
    output: the attention scores (heads, steps, steps) and the feed-forward
    activations (steps, ff)."""
    return [(layer.heads, steps, steps), (steps, layer.ff)]


def context(network):
    """The longest sequence `network` takes (a transformer's position
    table), or None where it has no such limit."""
    for layer in network.layers:
        if type(layer) is Transformer:
            return layer.context
    return None


def sequence_variant(network, steps):
    """`network` over sequences of `steps` tokens (a string or an int)."""
    limit = context(network)
    if limit is None:
        raise HarnessError("{} takes no sequence length: only a transformer's "
                           "name takes {}STEPS".format(network.name,
                                                       SEQUENCE_SEPARATOR))
    text = str(steps)
    if not text.isdigit() or int(text) < 1:
        raise HarnessError("sequence length in {}{}{} must be a positive "
                           "integer".format(network.name, SEQUENCE_SEPARATOR,
                                            text))
    if int(text) > limit:
        raise HarnessError(
            "sequence length {} is above {}'s context of {} tokens".format(
                int(text), network.name, limit))
    return network._replace(
        name="{}{}{}".format(network.name, SEQUENCE_SEPARATOR, int(text)),
        input_shape=(int(text),),
        description="{}; sequences of {} tokens".format(network.description,
                                                       int(text)))
