"""The PyTorch backend's translation of harness.networks into torch.nn
modules: one module per layer kind (the classes torch.nn lacks defined on
first use), the model, initialised as the network describes it, and its
parameter count."""

from ... import networks as nets
from ...errors import HarnessError
from . import transformer
from .initial import glorot as _glorot, uniform
from .load import _torch


def _activation(name):
    nn = _torch().nn
    if name is None:
        return []
    return [{"relu": nn.ReLU, "sigmoid": nn.Sigmoid}[name]()]


def _uninitialised(module_class, *args, **kwargs):
    # Every parameter of these modules is initialised below as the network
    # describes it; PyTorch's own draw over them first (0.35 s for fcn5's
    # 118M weights on one CPU core, a third of its model build) would be
    # thrown away. skip_init: PyTorch 1.10+.
    skip = getattr(_torch().nn.utils, "skip_init", None)
    if skip is None:
        return module_class(*args, **kwargs)
    return skip(module_class, *args, **kwargs)


def _build_module(resolved_layers):
    # Why this is long: one branch per layer kind, read as one table of
    # torch.nn equivalents.
    torch = _torch()
    nn = torch.nn
    modules = []
    for r in resolved_layers:
        layer, kind = r.layer, type(r.layer)
        if kind is nets.Dense:
            linear = _uninitialised(nn.Linear, r.in_shape[0], layer.units)
            _glorot(linear.weight, r.in_shape[0], layer.units)
            nn.init.zeros_(linear.bias)
            modules += [linear] + _activation(layer.activation)
        elif kind is nets.TimeDense:
            linear = _uninitialised(nn.Linear, r.in_shape[1], layer.units)
            _glorot(linear.weight, r.in_shape[1], layer.units)
            nn.init.zeros_(linear.bias)
            modules.append(linear)
        elif kind is nets.Conv:
            before, after = layer.pad
            if before != after:
                modules.append(nn.ZeroPad2d((before, after, before, after)))
                before = 0
            conv = _uninitialised(nn.Conv2d, r.in_shape[0], layer.filters,
                                  layer.kernel, layer.stride, padding=before,
                                  bias=layer.bias)
            receptive = layer.kernel ** 2
            _glorot(conv.weight, r.in_shape[0] * receptive,
                    layer.filters * receptive)
            if layer.bias:
                nn.init.zeros_(conv.bias)
            modules += [conv] + _activation(layer.activation)
        elif kind is nets.BatchNorm:
            norm = nn.BatchNorm2d if len(r.in_shape) == 3 else nn.BatchNorm1d
            # PyTorch's momentum weighs the new batch: 1 - the decay.
            modules += [norm(r.in_shape[0], eps=layer.eps,
                             momentum=1.0 - layer.momentum)]
            modules += _activation(layer.activation)
        elif kind is nets.Activation:
            modules += _activation(layer.fn)
        elif kind is nets.Pool:
            if layer.op == "max":
                modules.append(nn.MaxPool2d(layer.kernel, layer.stride,
                                            ceil_mode=True))
            else:
                modules.append(nn.AvgPool2d(layer.kernel, layer.stride,
                                            ceil_mode=True,
                                            count_include_pad=False))
        elif kind is nets.GlobalAvgPool:
            modules += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        elif kind is nets.Flatten:
            modules.append(nn.Flatten())
        elif kind is nets.Residual:
            body, shortcut = r.children
            modules.append(_Residual(
                _build_module(body),
                None if shortcut is None else _build_module(shortcut),
                layer.activation))
        elif kind is nets.SubsamplePad:
            modules.append(_SubsamplePad(layer.stride,
                                         layer.channels - r.in_shape[0]))
        elif kind is nets.Embedding:
            embedding = _uninitialised(nn.Embedding, layer.vocab, layer.dim)
            uniform(embedding.weight, -0.05, 0.05)
            modules.append(embedding)
        elif kind is nets.LSTM:
            modules.append(_LSTM(r.in_shape[1], layer.hidden, layer.layers))
        else:
            raise HarnessError("pytorch backend cannot build {}".format(
                kind.__name__))
    return nn.Sequential(*modules)


_CLASSES = []


def _module_classes():
    # Defined on first use: nn.Module must not be touched at import time.
    if _CLASSES:
        return _CLASSES
    nn = _torch().nn
    functional = _torch().nn.functional

    class Residual(nn.Module):
        def __init__(self, body, shortcut, activation):
            super(Residual, self).__init__()
            self.body = body
            self.shortcut = shortcut
            self.activation = activation

        def forward(self, x):
            out = self.body(x)
            out = out + (x if self.shortcut is None else self.shortcut(x))
            return functional.relu(out) if self.activation == "relu" else out

    class SubsamplePad(nn.Module):
        def __init__(self, stride, extra_channels):
            super(SubsamplePad, self).__init__()
            self.stride = stride
            self.extra = extra_channels

        def forward(self, x):
            x = x[:, :, ::self.stride, ::self.stride]
            return functional.pad(x, (0, 0, 0, 0, 0, self.extra))

    class LSTM(nn.Module):
        def __init__(self, inputs, hidden, layers):
            super(LSTM, self).__init__()
            # nn.LSTM takes no `device` by name, which skip_init needs;
            # its weights are few.
            self.lstm = nn.LSTM(inputs, hidden, layers, batch_first=True)
            for name, weight in self.lstm.named_parameters():
                if name.startswith("weight_ih"):
                    _glorot(weight, inputs if name.endswith("l0") else hidden,
                            4 * hidden)
                elif name.startswith("weight_hh"):
                    _glorot(weight, hidden, 4 * hidden)
                else:
                    nn.init.zeros_(weight)

        def forward(self, x):
            return self.lstm(x)[0]

    _CLASSES.extend((Residual, SubsamplePad, LSTM))
    return _CLASSES


def _Residual(*args):
    return _module_classes()[0](*args)


def _SubsamplePad(*args):
    return _module_classes()[1](*args)


def _LSTM(*args):
    return _module_classes()[2](*args)


def build_model(network, batch_size, device, seed):
    """The network as an nn.Sequential on the CPU (the caller moves it),
    initialised as described from `seed` (PyTorch's global generator)."""
    _torch().manual_seed(seed)
    return transformer.or_sequential(nets.resolve(network), _build_module)


def count_parameters(model):
    """Trainable parameters, as PyTorch counts them."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
