"""te errors and edge cases of reduction ranges."""
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import ShapeError


def test_empty_reduction_yields_the_identity():
    """ONNX reductions over an empty axis give the reducer's identity (0 for sum, -inf for max)."""
    A = te.placeholder((3, 0), name="A")
    k = te.reduce_axis((0, 0), name="k")
    total = te.compute((3,), lambda i: te.sum(A[i, k], axis=k), name="total")
    largest = te.compute((3,), lambda i: te.max(A[i, k], axis=k), name="largest")
    f = tk.build(te.create_schedule([total.op, largest.op]), [A, total, largest], target="llvm")
    out_sum, out_max = np.ones(3, "float32"), np.ones(3, "float32")
    f(np.zeros((3, 0), "float32"), out_sum, out_max)
    np.testing.assert_array_equal(out_sum, 0.0)
    np.testing.assert_array_equal(out_max, -np.inf)


def test_negative_reduction_range_is_refused():
    with pytest.raises(ShapeError, match=r"te.reduce_axis k: range \(4, 2\) has a negative extent"):
        te.reduce_axis((4, 2), name="k")
