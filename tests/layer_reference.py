"""Plain-Python references for layer conventions (pooling, padding), used
by the backend tests to check what a framework computed."""


def grid(flat, channels, h, w):
    """A flat C-order list as [channel][row][column]."""
    return [[flat[(c * h + i) * w:(c * h + i + 1) * w] for i in range(h)]
            for c in range(channels)]


def pool(x, op, k, s):
    """Ceil-mode pooling over in-bounds values only (the description)."""
    channels, h, w = len(x), len(x[0]), len(x[0][0])
    out_h = -(-(h - k) // s) + 1
    out_w = -(-(w - k) // s) + 1
    out = []
    for c in range(channels):
        for i in range(out_h):
            for j in range(out_w):
                window = [x[c][a][b] for a in range(i * s, min(i * s + k, h))
                          for b in range(j * s, min(j * s + k, w))]
                out.append(max(window) if op == "max"
                           else sum(window) / len(window))
    return out


def ones_conv(x, k, s, before, after):
    """A one-filter convolution with every weight 1: the sum of the in-bounds
    inputs of each window, windows starting `before` pixels outside."""
    channels, h, w = len(x), len(x[0]), len(x[0][0])
    out_h = (h + before + after - k) // s + 1
    out_w = (w + before + after - k) // s + 1
    out = []
    for i in range(out_h):
        for j in range(out_w):
            top, left = i * s - before, j * s - before
            out.append(sum(x[c][a][b] for c in range(channels)
                           for a in range(max(top, 0), min(top + k, h))
                           for b in range(max(left, 0), min(left + k, w))))
    return out


def subsample(x, s):
    """Every s-th pixel of every channel, flat."""
    return [x[c][i][j] for c in range(len(x)) for i in range(0, len(x[0]), s)
            for j in range(0, len(x[0][0]), s)]
