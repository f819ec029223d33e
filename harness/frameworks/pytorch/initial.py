"""PyTorch's initial draws: its own CPU generator, a large tensor drawn a
fixed span at a time by as many threads as the cell has.

PyTorch draws uniform_ on the CPU one value at a time in the calling
thread, and on a model's fresh memory each 4 KiB page is faulted in as the
draw reaches it: fcn5's 118M weights took 0.56 s of its 0.60 s build on
two cores, one of them idle (docs/measurements/pytorch-smoke-floor-2026-12-06).
Here a tensor of at least two spans (draws.SPAN, numpy's draws' too)
draws each span from a generator of its own, seeded in order from
PyTorch's global generator (which build_model seeds with the cell's
seed), and the cell's threads (torch.get_num_threads) share the spans,
as draws.side_by_side shares numpy's: the values depend on the seed
alone, not on how many threads drew them. A smaller tensor draws from the
global generator, as nn.init.uniform_ does.
"""
import math

from ..draws import SPAN, side_by_side
from .load import _torch

# torch.randint's bound for the spans' seeds (int64's range).
_SEEDS = 1 << 62


def uniform(weight, low, high):
    """Fill `weight` (a parameter or tensor on the CPU) with uniform values
    in [low, high), as nn.init.uniform_ does."""
    torch = _torch()
    # Detached: the same memory, drawn into outside autograd in any thread
    # (no_grad holds in the thread that sets it only).
    values = weight.detach()
    if values.numel() < 2 * SPAN or not values.is_contiguous():
        values.uniform_(low, high)
        return
    flat = values.view(-1)
    starts = range(0, flat.numel(), SPAN)
    seeds = torch.randint(0, _SEEDS, (len(starts),)).tolist()
    spans = [(flat[start:start + SPAN], seed)
             for start, seed in zip(starts, seeds)]
    side_by_side(lambda span: _draw(span, low, high), spans,
                 torch.get_num_threads())


def _draw(span, low, high):
    values, seed = span
    generator = _torch().Generator()
    generator.manual_seed(seed)
    # uniform_ releases the GIL: the threads draw in parallel.
    values.uniform_(low, high, generator=generator)


def glorot(weight, fan_in, fan_out):
    """Glorot-uniform values with the description's fans."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    uniform(weight, -limit, limit)
