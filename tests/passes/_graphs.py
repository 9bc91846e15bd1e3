"""Small graphs shared by the pass tests (not a test module)."""
import numpy as np

from tensorkiln import graph

RNG = np.random.default_rng(0)


def const(*shape, low=0.5, high=1.5):
    return graph.const(RNG.uniform(low, high, size=shape).astype("float32"))


def conv_bn_relu(x, in_channels, out_channels):
    conv = graph.nn.conv2d(x, const(out_channels, in_channels, 3, 3, low=-1, high=1), padding=1)
    bn = graph.nn.batch_norm(conv, const(out_channels), const(out_channels), const(out_channels),
                             const(out_channels), epsilon=1e-3)
    return graph.nn.relu(bn)


def inception(channels=8, size=16, blocks=2):
    """An Inception-like branchy graph: each block has four branches joined by a concatenate."""
    x = graph.var("x", shape=(1, channels, size, size))
    data = x
    for _ in range(blocks):
        c = data.shape[1]
        b1 = graph.nn.relu(graph.nn.conv2d(data, const(8, c, 1, 1)))
        b2 = graph.nn.relu(graph.nn.conv2d(graph.nn.relu(graph.nn.conv2d(data, const(16, c, 1, 1))),
                                           const(8, 16, 3, 3), padding=1))
        b3 = graph.nn.relu(graph.nn.conv2d(graph.nn.relu(graph.nn.conv2d(data, const(16, c, 1, 1))),
                                           const(8, 16, 5, 5), padding=2))
        b4 = graph.nn.relu(graph.nn.conv2d(graph.nn.max_pool2d(data, pool_size=3, padding=1), const(8, c, 1, 1)))
        data = graph.concatenate([b1, b2, b3, b4], axis=1)
    return graph.Module.from_expr(data)


def run(mod, **inputs):
    return graph.evaluate(mod, inputs)


def random_input(var):
    return RNG.uniform(-1, 1, size=var.shape).astype(var.dtype)


def conv3x3_weight(rng, cout: int, cin: int) -> np.ndarray:
    """An OIHW 3x3 weight, small enough that chains of convs stay in range."""
    return (rng.standard_normal((cout, cin, 3, 3)) * 0.3).astype(np.float32)


def conv3x3(x, weight: np.ndarray):
    """3x3 convolution, stride 1, padding 1, NCHW / OIHW, with a constant weight."""
    return graph.nn.conv2d(x, graph.const(weight), padding=(1, 1, 1, 1))


def np_conv3x3(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """`conv3x3` in numpy, in float64: the reference."""
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, weight.astype(np.float64))


def assert_same_bits(first, second) -> None:
    """Two lists of outputs with the same dtypes, shapes and bits."""
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
