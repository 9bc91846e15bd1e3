"""ops/nn/winograd.py: the te compute of nn.conv2d_winograd (graph/ops/winograd.py has the op and the math).

Seven stages, each a plain compute, so a target schedules them as it likes (every stage but
the padding and the output keeps its tag, so fused-group scheduling does not inline it). With
m the tile size, a = m + 2, P = N * tiles_h * tiles_w the tiles and p = (n, ty, tx) one of them:

    tiles[p, i, j, c]      = pad(data)[n, ty*m + i, tx*m + j, c]            the a x a input tile
    rows[e, j, p, c]       = sum_i B^T[e, i] * tiles[p, i, j, c]            B^T d  (one side)
    data[e, f, p, c]       = sum_j B^T[f, j] * rows[e, j, p, c]             B^T d B
    product[e, f, p, k]    = sum_c data[e, f, p, c] * U[e, f, k // nb, c, k % nb]   a^2 GEMMs
    inverse_rows[v, f, p, k] = sum_e A^T[v, e] * product[e, f, p, k]        A^T M  (one side)
    inverse[p, v, w, k]    = sum_f A^T[w, f] * inverse_rows[v, f, p, k]     A^T M A
    out[n, y, x, k]        = inverse[(n, y // m, x // m), y % m, x % m, k]

The transforms are written as sums over the nonzero entries of one row of a constant matrix,
chosen by selects on the row index: once a schedule unrolls that index the selects fold
(tir.arith keeps the taken branch) and each output is a handful of adds of vectors. Splitting
each 2-D transform into two 1-D ones (rows, then columns) is the separable form: 2 a^3 terms
per tile and channel instead of a^4. The stage ops carry `attrs["winograd"]` naming their role.
"""
from __future__ import annotations

from ... import te
from ...graph.ops.winograd import winograd_matrices, winograd_tiles
from ...tir import nodes as n
from .. import tags
from .conv2d import pad_spatial

__all__ = ["conv2d_winograd_nhwc", "conv2d_winograd", "STAGE_ROLES"]

STAGE_ROLES = ("tiles", "rows", "data", "product", "inverse_rows", "inverse")
"""`op.attrs["winograd"]` of the stages, producers first; the output stage has the op's tag instead."""


def _combination(coefficients, term):
    """sum_i c_i * term(i) over the nonzero c_i (1 and -1 without a multiply)."""
    total = None
    for i, c in enumerate(coefficients):
        if c == 0:
            continue
        value = term(i)
        value = value if c == 1 else -value if c == -1 else value * float(c)
        total = value if total is None else total + value
    return total


def _row_of(matrix, row, term):
    """sum_i matrix[row, i] * term(i) for a symbolic `row`: sum_r select(row == r, <row r's sum>, 0).

    Once `row` is constant every select folds, to its row's sum or to 0 (and x + 0 to x). A flat
    sum rather than a chain of selects: lowering guards the reads in each branch with the
    branch's condition (te.if_then_else semantics), and in a chain the conditions nest, so the
    reads of the last row carried every earlier row's negated test, a quarter of a Winograd
    kernel's lowering time."""
    zero = n.const(0.0, "float32")
    reads: dict = {}

    def shared(i):
        # one node per read, shared by every row's sum: lowering and the simplifier work on it once
        if i not in reads:
            reads[i] = term(i)
        return reads[i]
    total = None
    for r in range(len(matrix)):
        value = n.Select(n.EQ(row, n.const(r, row.dtype)), _combination(matrix[r], shared), zero)
        total = value if total is None else total + value
    return total


def conv2d_winograd_nhwc(data: te.Tensor, weight: te.Tensor, tile_size: int,
                         padding: tuple[int, int, int, int]) -> te.Tensor:
    """NHWC data (N, H, W, C), transformed weight (a, a, K / nb, C, nb) -> (N, OH, OW, K), 3x3 stride 1."""
    b_t, _, a_t = winograd_matrices(tile_size)
    m, alpha = tile_size, tile_size + 2
    batch, height, width, channels = (int(d) for d in data.shape)
    block = int(weight.shape[4])
    out_channels = int(weight.shape[2]) * block
    top, left, bottom, right = padding
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = winograd_tiles(out_h, out_w, m)
    per_image = tiles_h * tiles_w
    # the last tile may reach past the output: pad the input to whole tiles
    padded = pad_spatial(data, (top, left, tiles_h * m + 2 - height - top, tiles_w * m + 2 - width - left), "NHWC")

    def stage(shape, body, role, tag=tags.WINOGRAD_TRANSFORM):
        return te.compute(shape, body, name=f"T_winograd_{role}", tag=tag,
                          attrs={"winograd": role, "tile_size": m})

    def input_tile(p, i, j, c):
        image, t = p // per_image, p % per_image
        return padded[image, (t // tiles_w) * m + i, (t % tiles_w) * m + j, c]

    count = batch * per_image
    tiles = stage((count, alpha, alpha, channels), input_tile, "tiles")
    rows = stage((alpha, alpha, count, channels),
                 lambda e, j, p, c: _row_of(b_t, e, lambda i: tiles[p, i, j, c]), "rows")
    transformed = stage((alpha, alpha, count, channels),
                        lambda e, f, p, c: _row_of(b_t, f, lambda j: rows[e, j, p, c]), "data")
    rc = te.reduce_axis((0, channels), name="rc")
    product = stage((alpha, alpha, count, out_channels),
                    lambda e, f, p, k: te.sum(transformed[e, f, p, rc] * weight[e, f, k // block, rc, k % block],
                                              axis=rc),
                    "product", tag=tags.WINOGRAD_PRODUCT)
    inverse_rows = stage((m, alpha, count, out_channels),
                         lambda v, f, p, k: _row_of(a_t, v, lambda e: product[e, f, p, k]), "inverse_rows")
    inverse = stage((count, m, m, out_channels),
                    lambda p, v, w, k: _row_of(a_t, w, lambda f: inverse_rows[v, f, p, k]), "inverse")

    def output(image, y, x, k):
        return inverse[image * per_image + (y // m) * tiles_w + x // m, y % m, x % m, k]

    return te.compute((batch, out_h, out_w, out_channels), output, name="T_conv2d_winograd",
                      tag=tags.CONV2D_WINOGRAD_NHWC,
                      attrs={"tile_size": m, "padding": tuple(padding), "tiles": (tiles_h, tiles_w)})


def conv2d_winograd(inputs, attrs, out_type):
    """Registry compute of nn.conv2d_winograd."""
    data, weight = inputs
    return conv2d_winograd_nhwc(data, weight, attrs.tile_size, attrs.padding)
