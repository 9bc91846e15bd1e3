"""passes/simplify_inference.py: rewrite training-time ops into their inference form.

    %1 = nn.batch_norm(%0, %gamma, %beta, %mean, %var)   ->   %1 = multiply(%0, const(scale, (C, 1, 1)))
                                                              %2 = add(%1, const(shift, (C, 1, 1)))

with scale = gamma / sqrt(var + epsilon) and shift = beta - mean * scale, shaped
to broadcast along the batch norm's axis; `copy` of a computed value
disappears (a pure graph cannot tell the copy from the original; a copy of a
model input stays, so the output keeps its own buffer). The ONNX frontend
already drops Identity and inference-mode Dropout. Then `fold_scale_axis` pushes the
per-channel scale into the weights of the producing conv2d / dense / matmul
and the shift into a bias_add, so conv -> batch_norm -> relu ends as
conv2d -> bias_add -> relu, which `fuse_ops` makes one kernel.
"""
from __future__ import annotations

import numpy as np

from ..graph import Call, Constant, Expr, Module, Var, get_op, rewrite
from ..graph import builder
from ..graph.registry import Op
from ..ir.dtypes import to_numpy
from .fold_scale_axis import fold_scale_axis
from .manager import register_pass

__all__ = ["simplify_inference", "IDENTITY_OPS"]

# Ops that return their input unchanged at inference time.
IDENTITY_OPS = ("copy",)


@register_pass("simplify_inference", opt_level=1)
def simplify_inference(mod: Module) -> Module:
    """Lower nn.batch_norm to multiply/add, drop identity ops, then fold scales into weights."""
    batch_norm = get_op("nn.batch_norm")
    identities = {get_op(name) for name in IDENTITY_OPS}

    def simplify(node: Expr) -> Expr | None:
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            return None
        if node.op in identities and not isinstance(node.args[0], Var):
            return node.args[0]
        if node.op is batch_norm:
            return _lower_batch_norm(node)
        return None

    return fold_scale_axis(rewrite(mod, simplify))


def _lower_batch_norm(call: Call) -> Expr:
    data, gamma, beta, mean, var = call.args
    axis = call.attrs.axis % data.ndim
    channel_shape = (data.shape[axis],) + (1,) * (data.ndim - axis - 1)
    if all(isinstance(p, Constant) for p in (gamma, beta, mean, var)):
        dtype = to_numpy(data.dtype)
        scale = gamma.value.astype(np.float64) / np.sqrt(var.value.astype(np.float64) + call.attrs.epsilon)
        shift = beta.value.astype(np.float64) - mean.value.astype(np.float64) * scale
        scale_const = Constant(scale.astype(dtype).reshape(channel_shape))
        shift_const = Constant(shift.astype(dtype).reshape(channel_shape))
        return builder.add(builder.multiply(data, scale_const), shift_const)
    # Parameters computed at run time: the same algebra as graph ops (fold_constants folds what it can).
    epsilon = Constant(np.array(call.attrs.epsilon, dtype=to_numpy(data.dtype)))
    scale = builder.multiply(gamma, builder.rsqrt(builder.add(var, epsilon)))
    shift = builder.subtract(beta, builder.multiply(mean, scale))
    scale = builder.reshape(scale, channel_shape)
    shift = builder.reshape(shift, channel_shape)
    return builder.add(builder.multiply(data, scale), shift)
