"""The te compute of nn.conv2d_winograd (ops/nn/winograd.py): how its transform stages are built.

Numerics are checked end to end elsewhere (plugins/cpu_llvm/tests/test_winograd.py against a direct
convolution, tests/ops/test_op_numerics.py against the registered reference); this pins the shape of
the expressions that lowering and the simplifier walk, which is compile time.
"""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln import te
from tensorkiln.graph.ops.winograd import winograd_matrices
from tensorkiln.ops.nn.winograd import conv2d_winograd_nhwc
from tensorkiln.te.expr import TensorRead
from tensorkiln.tir.nodes import PrimExpr
from tensorkiln.tir.visit import child_fields, post_order_visit


def _stage(output: te.Tensor, role: str):
    """The compute op of the stage with attrs["winograd"] == role, found from the output."""
    pending, seen = [output], set()
    while pending:
        tensor = pending.pop()
        op = tensor.op
        if id(op) in seen:
            continue
        seen.add(id(op))
        if getattr(op, "attrs", {}).get("winograd") == role:
            return op
        pending.extend(getattr(op, "input_tensors", ()))
    raise AssertionError(f"no stage {role!r}")


def _reads_of(op, tensor: te.Tensor) -> tuple[int, int]:
    """(distinct read nodes of `tensor` in the op's body, references to them counted along every path)."""
    distinct = set()
    post_order_visit(op.body, lambda x: distinct.add(id(x)) if isinstance(x, TensorRead) and x.tensor is tensor
                     else None)

    def references(node) -> int:
        if isinstance(node, TensorRead):
            return int(node.tensor is tensor)
        if not isinstance(node, PrimExpr):
            return 0
        children = (getattr(node, name) for name in child_fields(type(node)))
        return sum(sum(map(references, c)) if isinstance(c, tuple) else references(c) for c in children)
    return len(distinct), references(op.body)


@pytest.mark.parametrize("tile_size", [2, 4])
def test_every_row_of_a_transform_shares_one_read_per_input_element(tile_size):
    """rows[e, j, p, c] = sum_r select(e == r, sum_i B^T[r, i] * tiles[p, i, j, c], 0): each tiles[p, i, j, c]
    is one node shared by every row's sum, so lowering and the simplifier handle it once per i rather
    than once per nonzero of B^T (resnet50's Winograd kernels: their first simplification 2-4x as fast,
    the same LLVM IR)."""
    data = te.placeholder((1, 14, 14, 8), name="data")
    alpha = tile_size + 2
    weight = te.placeholder((alpha, alpha, 2, 8, 4), name="weight")
    out = conv2d_winograd_nhwc(data, weight, tile_size, (1, 1, 1, 1))
    b_t, _, a_t = winograd_matrices(tile_size)
    for role, source_role, matrix in (("rows", "tiles", b_t), ("data", "rows", b_t),
                                      ("inverse_rows", "product", a_t), ("inverse", "inverse_rows", a_t)):
        op, source = _stage(out, role), _stage(out, source_role).output(0)
        distinct, references = _reads_of(op, source)
        # one read per column of the matrix that has a nonzero, each referenced by every row using it
        assert distinct == int(np.count_nonzero(np.any(matrix != 0, axis=0))), role
        assert references == int(np.count_nonzero(matrix)), role
