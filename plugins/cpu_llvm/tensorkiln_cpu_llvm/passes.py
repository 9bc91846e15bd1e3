"""passes.py: cpu_llvm's graph passes, returned from its tensorkiln_passes hook (they run after the core's).

`cpu_llvm_conv1x1_as_matmul`, `cpu_llvm_flatten_matmul`: 1x1 convs and matmuls of higher rank as
2-D or batched GEMMs for the micro-kernel, between free reshapes (gemm_rewrites.py).

`cpu_llvm_pack_dense_weights`: 2-D matmul and dense calls the micro-kernel runs with a constant weight
become nn.dense_pack, the weight packed once here into the micro-kernel's nr-wide slivers (weight_packing.py).

`cpu_llvm_transpose_dense_weights`: nn.dense(x, W) with a constant W[N, K] whose GEMM the
micro-kernel runs (strategies/ukernel.py), where packing did not take it (the packing pass disabled),
becomes nn.matmul(x, W.T) with W.T[K, N] computed once here. The micro-kernel packs B into nr-wide
panels on every call; from W[N, K] that is a transposing gather of K * N scalars, from W.T[K, N] a
copy of contiguous vectors. Batch-1 dense keeps W[N, K]: its split reduction streams the rows of W
(strategies/dense.py).

`cpu_llvm_winograd`: 3x3 stride-1 NHWC convs with constant weights become nn.conv2d_winograd,
their weights transformed once here (winograd_weights.py; `-winograd=off` keeps them direct).

`cpu_llvm_pack_conv_weights` (last): constant HWIO weights of NHWC convs packed as OHWI{n}o, one
contiguous stream per register tile's n output channels (weight_packing.py).
"""
from __future__ import annotations

import numpy as np

from tensorkiln.graph import Call, Constant, Module, call, owned_constant, rewrite
from tensorkiln.passes import get_pass, register_pass

from . import gemm_rewrites, weight_packing, winograd_weights

__all__ = ["PASSES", "transpose_dense_weights"]


@register_pass("cpu_llvm_transpose_dense_weights", opt_level=2)
def transpose_dense_weights(mod: Module, target=None) -> Module:
    """Rewrite micro-kernel-sized dense calls with constant weights to matmul with the weight transposed."""
    from .strategies.ukernel import gemm_applies

    def visit(node):
        if not (isinstance(node, Call) and getattr(node.op, "name", "") == "nn.dense"):
            return None
        data, weight = node.args
        if not isinstance(weight, Constant) or target is None or gemm_applies(node, target) is not True:
            return None
        transposed = owned_constant(np.ascontiguousarray(weight.value.T))
        return call("nn.matmul", data, transposed)
    return rewrite(mod, visit)


register_pass("cpu_llvm_conv1x1_as_matmul", opt_level=2)(gemm_rewrites.conv1x1_as_matmul)
register_pass("cpu_llvm_flatten_matmul", opt_level=2)(gemm_rewrites.flatten_matmul)
register_pass("cpu_llvm_pack_dense_weights", opt_level=2)(weight_packing.pack_dense_weights)
register_pass("cpu_llvm_winograd", opt_level=2)(winograd_weights.convert_to_winograd)
register_pass("cpu_llvm_pack_conv_weights", opt_level=2)(weight_packing.pack_conv_weights)


PASSES = (get_pass("cpu_llvm_conv1x1_as_matmul"), get_pass("cpu_llvm_flatten_matmul"),
          get_pass("cpu_llvm_pack_dense_weights"), get_pass("cpu_llvm_transpose_dense_weights"),
          get_pass("cpu_llvm_winograd"), get_pass("cpu_llvm_pack_conv_weights"))
"""The registered Pass objects, in the order they run. The dense weights are packed straight from W[N, K] before
the transposing pass, which then transposes only what packing left (all of them when packing is disabled), so no
weight is transposed and then transposed back."""
