"""Broadcasting binary ops compiled end to end (ops/broadcast.py): the edge cases of integer
division, compared with the registry's numpy reference on cpu_llvm and opencl."""
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph import Module, get_op

TARGETS = ["cpu_llvm", "opencl"]


def _division_operands(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Every sign pair, division by 0 and -1, and INT_MIN / -1 (which traps as a machine division)."""
    info = np.iinfo(dtype)
    low = info.min if info.min < 0 else 9
    minus_one = -1 if info.min < 0 else 3
    negative = -7 if info.min < 0 else 8
    a = np.array([7, negative, 7, negative, 7, low, low, 0, 5, info.max], dtype)
    b = np.array([2, 2, -2 if info.min < 0 else 4, 0, 0, minus_one, 0, 0, minus_one, 1], dtype)
    return a, b


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint32"])
@pytest.mark.parametrize("op_name", ["divide", "mod", "fmod"])
def test_integer_division_by_zero_and_int_min_by_minus_one_follow_numpy_without_trapping(target, dtype,
                                                                                          op_name):
    # before the fix the kernel executed sdiv/srem on these operands and the process died with SIGFPE
    a, b = _division_operands(dtype)
    x, y = graph.var("a", shape=a.shape, dtype=dtype), graph.var("b", shape=b.shape, dtype=dtype)
    lib = tk.compile(Module.from_expr(graph.call(op_name, x, y)), target=target)
    expected = get_op(op_name).reference(a, b, None)
    np.testing.assert_array_equal(lib(a=a, b=b), expected)
    zero_divisor = b == 0
    assert (expected[zero_divisor] == 0).all()  # the documented result: numpy's, x / 0 == x % 0 == 0
