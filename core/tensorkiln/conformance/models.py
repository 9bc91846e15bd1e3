"""conformance/models.py: small end-to-end models built with the graph builder (MLP, residual CNN, attention).

Each builder returns `(graph.Module, {input name: array})` with seeded random
weights; the kit's models level and `tensorkiln debug bisect` tests use them.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["MODELS", "mlp", "residual_cnn", "attention_block"]


def _weights(rng: np.random.Generator, *shape: int, scale: float | None = None) -> np.ndarray:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return (rng.standard_normal(shape) * (scale or 1.0 / np.sqrt(fan_in))).astype("float32")


def mlp(seed: int = 0):
    """x[4, 16] -> dense 32 + bias + relu -> dense 10 + bias -> softmax."""
    from .. import graph

    rng = np.random.default_rng(seed)
    x = graph.var("x", shape=(4, 16))
    h = graph.nn.relu(graph.nn.bias_add(graph.nn.dense(x, graph.const(_weights(rng, 32, 16))),
                                        graph.const(_weights(rng, 32, scale=0.1)), axis=1))
    y = graph.nn.bias_add(graph.nn.dense(h, graph.const(_weights(rng, 10, 32))), graph.const(_weights(rng, 10, scale=0.1)),
                          axis=1)
    return graph.Module.from_expr(graph.nn.softmax(y, axis=-1)), {"x": rng.standard_normal((4, 16)).astype("float32")}


def residual_cnn(seed: int = 0, channels: int = 8):
    """x[1, 3, 8, 8] -> conv 3x3 (`channels`) + relu -> residual block (conv, relu, conv, add, relu) -> pool
    -> dense 5. More channels let a blocked layout (NCHW16c) take every conv."""
    from .. import graph

    rng = np.random.default_rng(seed)
    x = graph.var("x", shape=(1, 3, 8, 8))

    def conv(data, out_channels, in_channels):
        weight = graph.const(_weights(rng, out_channels, in_channels, 3, 3))
        bias = graph.const(_weights(rng, out_channels, scale=0.1))
        return graph.nn.bias_add(graph.nn.conv2d(data, weight, padding=(1, 1, 1, 1)), bias, axis=1)

    stem = graph.nn.relu(conv(x, channels, 3))
    block = conv(graph.nn.relu(conv(stem, channels, channels)), channels, channels)
    residual = graph.nn.relu(graph.add(block, stem))
    pooled = graph.reshape(graph.nn.global_avg_pool2d(graph.nn.max_pool2d(residual, pool_size=(2, 2), strides=(2, 2))),
                           (1, channels))
    logits = graph.nn.dense(pooled, graph.const(_weights(rng, 5, channels)))
    return graph.Module.from_expr(logits), {"x": rng.standard_normal((1, 3, 8, 8)).astype("float32")}


def attention_block(seed: int = 0):
    """One head of self-attention with a residual and layer norm: x[6, 8] (tokens, features)."""
    from .. import graph

    rng = np.random.default_rng(seed)
    tokens, features = 6, 8
    x = graph.var("x", shape=(tokens, features))
    q = graph.nn.dense(x, graph.const(_weights(rng, features, features)))
    k = graph.nn.dense(x, graph.const(_weights(rng, features, features)))
    v = graph.nn.dense(x, graph.const(_weights(rng, features, features)))
    scores = graph.multiply(graph.nn.matmul(q, graph.transpose(k, (1, 0))),
                            graph.const(np.float32(1.0 / np.sqrt(features))))
    attended = graph.nn.matmul(graph.nn.softmax(scores, axis=-1), v)
    out = graph.nn.dense(attended, graph.const(_weights(rng, features, features)))
    gamma = graph.const(np.ones(features, "float32"))
    beta = graph.const(np.zeros(features, "float32"))
    normed = graph.nn.layer_norm(graph.add(out, x), gamma, beta)
    return graph.Module.from_expr(normed), {"x": rng.standard_normal((tokens, features)).astype("float32")}


MODELS: dict[str, Callable] = {"mlp": mlp, "residual_cnn": residual_cnn, "attention": attention_block}
"""Model name -> builder(seed) -> (graph.Module, inputs)."""
