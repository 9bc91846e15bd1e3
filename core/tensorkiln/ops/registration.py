"""ops/registration.py: attach every te compute to the graph registry.

The one place that maps graph op names to this package's computes; `register_all()`
runs when `tensorkiln.ops` is imported. The graph package never imports te: the
compiler imports `tensorkiln.ops` lazily and then reads `get_op(name).compute`.
"""
from __future__ import annotations

from typing import Callable

from ..graph import registry
from . import bitcast, broadcast, col2im, elementwise, image, ngram, reduction, roi_align, sampling, scan, scatter, sort, transform
from .nn import conv2d, conv2d_nchwc, conv_nd, dense, norm, pooling, softmax, window_nd, winograd

__all__ = ["COMPUTES", "register_all", "uncovered_ops"]


def _computes() -> dict[str, Callable]:
    table: dict[str, Callable] = {}
    for name in elementwise.UNARY_EXPRESSIONS:
        table[name] = elementwise.unary_compute(name)
    for name in elementwise.ACTIVATIONS:
        table[name] = elementwise.activation_compute(name)
    table.update({"clip": elementwise.clip, "cast": elementwise.cast, "isinf": elementwise.isinf,
                  "bitwise_not": elementwise.bitwise_not})
    for name in broadcast.BINARY_EXPRESSIONS:
        table[name] = broadcast.binary_compute(name)
    table.update({"power": broadcast.power, "where": broadcast.where, "nn.bias_add": broadcast.bias_add,
                  "broadcast_to": broadcast.broadcast_to})
    for name in ("sum", "mean", "max", "min", "prod"):
        table[name] = reduction.reduce_compute(name)
    for name in ("argmax", "argmin"):
        table[name] = reduction.argreduce_compute(name)
    table.update({
        "reshape": transform.reshape, "transpose": transform.transpose, "squeeze": transform.squeeze,
        "expand_dims": transform.expand_dims, "concatenate": transform.concatenate, "split": transform.split,
        "strided_slice": transform.strided_slice, "take": transform.take,
        "gather_elements": transform.gather_elements, "gather_nd": transform.gather_nd, "tile": transform.tile,
        "nn.pad": transform.pad, "reverse": transform.reverse, "shape_of": transform.shape_of,
        "cumsum": scan.cumsum, "cumprod": scan.cumprod, "topk": sort.topk,
        "layout_transform": transform.layout_transform,
        "nn.conv2d": conv2d_nchwc.conv2d, "nn.conv2d_transpose": conv2d.conv2d_transpose,
        "nn.conv2d_winograd": winograd.conv2d_winograd,
        "nn.dense": dense.dense_compute, "nn.matmul": dense.matmul_compute, "nn.dense_pack": dense.dense_pack_compute,
        "nn.max_pool2d": pooling.max_pool2d, "nn.avg_pool2d": pooling.avg_pool2d,
        "nn.global_max_pool2d": pooling.global_max_pool, "nn.global_avg_pool2d": pooling.global_avg_pool,
        "nn.softmax": softmax.softmax, "nn.log_softmax": softmax.log_softmax,
        "nn.batch_norm": norm.batch_norm, "nn.layer_norm": norm.layer_norm, "nn.lrn": norm.lrn,
        "image.resize": image.resize, "image.grid_sample": sampling.grid_sample,
        "scatter_elements": scatter.scatter_elements, "scatter_nd": scatter.scatter_nd, "bitcast": bitcast.bitcast,
        "col2im": col2im.col2im, "ngram_counts": ngram.ngram_counts,
    })
    table.update({"nn.max_pool": window_nd.max_pool, "nn.avg_pool": window_nd.avg_pool,
                  "nn.max_pool_indices": window_nd.max_pool_indices, "nn.conv_transpose": window_nd.conv_transpose,
                  "image.roi_align": roi_align.roi_align})
    table["nn.conv"] = conv_nd.conv
    return table


COMPUTES: dict[str, Callable] = _computes()
"""Graph op name -> te compute `fn(inputs: list[te.Tensor], attrs, out_type) -> te.Tensor | list`."""


def register_all() -> None:
    """Set the te compute of every op this package covers.

    Ops registered in the graph but absent here keep `compute = None`; `uncovered_ops()`
    lists them. Calling it twice is harmless.
    """
    known = {op.name for op in registry.list_ops()}
    for name, compute in COMPUTES.items():
        if name in known:
            registry.set_compute(name, compute)


def uncovered_ops() -> list[str]:
    """Names of registered graph ops that have no te compute (control flow, whose bodies are compiled
    as models of their own and run by the executor, needs none)."""
    from ..graph.ops.control_flow import is_control_flow
    return [op.name for op in registry.list_ops() if op.name not in COMPUTES and not is_control_flow(op)]
