"""PyTorch's translation of harness.networks' Transformer: nn.Modules with
attention by torch.nn.functional.scaled_dot_product_attention, PyTorch's
fused path (flash or memory-efficient kernels on the GPU, its fused CPU
kernel on the CPU), which picks its kernel per call."""

from ... import networks as nets
from ...errors import Unsupported
from .initial import glorot as _glorot, uniform
from .load import _torch

# What the result records as the attention's implementation.
ATTENTION = ("torch.nn.functional.scaled_dot_product_attention "
             "(is_causal=True; PyTorch picks flash, memory-efficient or math "
             "per call)")


def _linear(inputs, units):
    linear = _torch().nn.Linear(inputs, units)
    _glorot(linear.weight, inputs, units)
    _torch().nn.init.zeros_(linear.bias)
    return linear


_CLASSES = []


def _classes():
    # Why this is long: the two nn.Module classes must be defined inside one
    # function, on first use (nn.Module must not be touched at import time).
    if _CLASSES:
        return _CLASSES
    torch = _torch()
    nn, functional = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, layer):
            super(Block, self).__init__()
            d = layer.dim
            self.heads = layer.heads
            self.norm_1 = nn.LayerNorm(d, eps=layer.eps)
            self.qkv = _linear(d, 3 * d)
            self.out = _linear(d, d)
            self.norm_2 = nn.LayerNorm(d, eps=layer.eps)
            self.up = _linear(d, layer.ff)
            self.down = _linear(layer.ff, d)

        def forward(self, h):
            batch, steps, d = h.shape
            qkv = self.qkv(self.norm_1(h))
            # (batch, steps, 3, heads, d/heads) -> 3 x (batch, heads, steps, .)
            q, k, v = qkv.view(batch, steps, 3, self.heads,
                               d // self.heads).permute(2, 0, 3, 1, 4)
            att = functional.scaled_dot_product_attention(q, k, v,
                                                          is_causal=True)
            h = h + self.out(att.transpose(1, 2).reshape(batch, steps, d))
            return h + self.down(functional.gelu(self.up(self.norm_2(h))))

    class Transformer(nn.Module):
        def __init__(self, layer):
            super(Transformer, self).__init__()
            self.tokens = nn.Embedding(layer.vocab, layer.dim)
            self.positions = nn.Embedding(layer.context, layer.dim)
            uniform(self.tokens.weight, -0.05, 0.05)
            uniform(self.positions.weight, -0.05, 0.05)
            self.blocks = nn.ModuleList([Block(layer)
                                         for _ in range(layer.layers)])
            self.norm = nn.LayerNorm(layer.dim, eps=layer.eps)

        def forward(self, tokens):
            steps = tokens.shape[1]
            where = torch.arange(steps, device=tokens.device)
            h = self.tokens(tokens) + self.positions(where)
            for block in self.blocks:
                h = block(h)
            # Tied: the output projection is the token table, no bias.
            return functional.linear(self.norm(h), self.tokens.weight)

    _CLASSES.extend((Transformer,))
    return _CLASSES


def or_sequential(resolved_layers, build_module):
    """The model of a network of one Transformer layer, else
    build_module(resolved_layers) (the backend's nn.Sequential)."""
    if [type(r.layer) for r in resolved_layers] == [nets.Transformer]:
        return build(resolved_layers[0])
    return build_module(resolved_layers)


def build(r):
    """The module for resolved Transformer layer `r`."""
    functional = _torch().nn.functional
    if not hasattr(functional, "scaled_dot_product_attention"):
        raise Unsupported("PyTorch {} predates scaled_dot_product_attention "
                          "(2.0 and newer)".format(_torch().__version__))
    return _classes()[0](r.layer)
