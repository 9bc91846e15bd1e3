"""Bitwise ops and shifts lower to tir's bit nodes (BitAnd/BitOr/BitXor/ShiftLeft/ShiftRight) and match
numpy on every integer dtype, uint64 included: through cpu_llvm, the tir interpreter and the shared C
emitter (built with the system compiler); and end to end from ONNX against onnxruntime."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.graph.registry import get_op
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.dtypes import from_numpy
from tensorkiln.ops import naive_schedule
from tensorkiln.sdk import CSourceEmitter

from ..ops.harness import run_op

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
BINARY = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]
CC = shutil.which("cc") or shutil.which("gcc")


def _operands(draw, dtype: str, op: str):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=7))
    a = draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(np.dtype(dtype))))
    if op.endswith("shift"):
        bits = np.dtype(dtype).itemsize * 8
        # in range, at the edges and past them (numpy defines those too: 0 or the sign fill)
        low = -3 if dtype.startswith("int") else 0
        b = draw(hnp.arrays(dtype, shape, elements=st.integers(low, bits + 2)))
    else:
        b = draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(np.dtype(dtype))))
    return a, b


@st.composite
def _cases(draw):
    dtype = draw(st.sampled_from(INT_DTYPES))
    op = draw(st.sampled_from(BINARY + ["bitwise_not"]))
    a, b = _operands(draw, dtype, op)
    return op, [a] if op == "bitwise_not" else [a, b]


def _expected(op: str, arrays):
    with np.errstate(all="ignore"):
        return get_op(op).reference(*arrays, None)


def _lowered(op: str, arrays):
    inputs = [te.placeholder(a.shape, from_numpy(a.dtype), name=f"x{i}") for i, a in enumerate(arrays)]
    out_type = get_op(op).type_rule(tuple(TensorType(a.shape, from_numpy(a.dtype)) for a in arrays), None)
    out = get_op(op).compute(inputs, None, out_type)
    return tk.lower(naive_schedule([out]), [*inputs, out], name="kernel"), out


@settings(max_examples=15, deadline=None)
@given(_cases())
def test_bit_ops_match_numpy_on_cpu_llvm_and_the_interpreter(case):
    op, arrays = case
    want = _expected(op, arrays)
    for backend in ("llvm", "interpret"):
        (got,) = run_op(get_op(op), arrays, None, backend)
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {arrays[0].dtype} on {backend}")


@pytest.mark.skipif(CC is None, reason="no system C compiler (cc) on PATH")
@settings(max_examples=6, deadline=None)
@given(_cases())
def test_bit_ops_match_numpy_through_the_c_emitter(case):
    from tensorkiln.sdk.native_c import build_native_module
    op, arrays = case
    func, out = _lowered(op, arrays)
    module = build_native_module(CSourceEmitter().emit([func]), compiler=CC, label="bits")
    got = np.zeros(arrays[0].shape, arrays[0].dtype)
    module.get_function("kernel")(*arrays, got)
    np.testing.assert_array_equal(got, _expected(op, arrays), err_msg=f"{op} {arrays[0].dtype} in C")


@pytest.mark.parametrize("op, node", [("bitwise_and", tir.BitAnd), ("bitwise_or", tir.BitOr),
                                      ("bitwise_xor", tir.BitXor), ("bitwise_not", tir.BitXor),
                                      ("left_shift", tir.ShiftLeft), ("right_shift", tir.ShiftRight)])
@pytest.mark.parametrize("dtype", ["int32", "uint64"])
def test_bit_ops_lower_to_bit_nodes_not_arithmetic(op, node, dtype):
    arrays = [np.zeros(4, dtype)] * (1 if op == "bitwise_not" else 2)
    func, _ = _lowered(op, arrays)
    found = []

    class Collect(tir.StmtExprVisitor):
        def visit_BinaryOp(self, e):
            found.append(type(e))
            self.generic_visit(e)
    Collect().visit_stmt(func.body)
    assert node in found
    # the old emulation extracted bits with floor division and modulo, one per bit
    assert tir.FloorMod not in found and tir.FloorDiv not in found and tir.Mul not in found


def test_bit_constants_fold_and_shift_amounts_out_of_range_stay():
    x = tir.Var("x", "int32")
    assert tir.simplify_expr(tir.BitAnd(tir.IntImm("int8", 0x5C), tir.IntImm("int8", 0x0F))).value == 0x0C
    assert tir.simplify_expr(tir.ShiftLeft(tir.IntImm("int8", 64), tir.IntImm("int8", 1))).value == -128
    assert tir.simplify_expr(tir.ShiftRight(tir.IntImm("int8", -128), tir.IntImm("int8", 7))).value == -1
    assert tir.simplify_expr(tir.ShiftRight(tir.IntImm("uint8", 200), tir.IntImm("uint8", 3))).value == 25
    # x & 1 is no division by 1 (the integer rules for // and % must not apply)
    assert isinstance(tir.simplify_expr(tir.BitAnd(x, tir.IntImm("int32", 1))), tir.BitAnd)
    assert isinstance(tir.simplify_expr(tir.ShiftLeft(tir.IntImm("int32", 1), tir.IntImm("int32", 40))),
                      tir.ShiftLeft)


def _onnx_model(op_type: str, dtype, n_inputs: int, **attrs):
    from onnx import TensorProto, helper
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    names = ["a", "b"][:n_inputs]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, elem, [3, 5]) for k in names],
                              [helper.make_tensor_value_info("y", elem, [3, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op_type, n_inputs, attrs", [
    ("BitwiseAnd", 2, {}), ("BitwiseOr", 2, {}), ("BitwiseXor", 2, {}), ("BitwiseNot", 1, {}),
    ("BitShift", 2, {"direction": "LEFT"}), ("BitShift", 2, {"direction": "RIGHT"})])
def test_uint64_onnx_models_match_onnxruntime_on_cpu_llvm(op_type, n_inputs, attrs):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    a = rng.integers(0, np.iinfo(np.uint64).max, (3, 5), dtype=np.uint64, endpoint=True)
    b = rng.integers(0, 64, (3, 5), dtype=np.uint64) if op_type == "BitShift" else \
        rng.integers(0, np.iinfo(np.uint64).max, (3, 5), dtype=np.uint64, endpoint=True)
    feeds = dict(zip(["a", "b"], [a, b][:n_inputs]))
    model = _onnx_model(op_type, np.uint64, n_inputs, **attrs)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    lib = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm")
    assert all(step.target.startswith("cpu_llvm") for step in lib.plan.steps)   # no fallback
    np.testing.assert_array_equal(lib.run(feeds)[0], want)
