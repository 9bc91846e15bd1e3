"""Sequences and optionals (import-time lists of tensors, converters/sequence.py): models that build,
edit and concatenate sequences, a Loop that grows a sequence, optionals; against onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.frontend import from_onnx
from tensorkiln.ir.errors import ShapeError, UnsupportedOpError

from .onnx_models import const_node, model, tensor

RNG = np.random.default_rng(0)


def _check(m, feeds):
    want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    mod = from_onnx(m)
    got = tk.compile(mod, "cpu_llvm").run(feeds)
    reference = graph.evaluate(mod, feeds)
    reference = reference if isinstance(reference, list) else [reference]
    for w, g, r in zip(want, got, reference):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)
        np.testing.assert_allclose(r, w, rtol=1e-6)


def test_split_edit_and_concatenate_a_sequence():
    nodes = [
        const_node("chunk", np.array(2, np.int64)), const_node("zero", np.array(0, np.int64)),
        const_node("minus1", np.array(-1, np.int64)),
        h.make_node("SplitToSequence", ["x", "chunk"], ["s"], axis=1),          # widths 2, 2, 1
        h.make_node("SequenceAt", ["s", "minus1"], ["last"]),
        h.make_node("Relu", ["last"], ["r"]),
        h.make_node("SequenceInsert", ["s", "r", "zero"], ["s2"]),              # r, a, b, c
        h.make_node("SequenceErase", ["s2", "zero"], ["s3"]),                   # a, b, c
        h.make_node("SequenceInsert", ["s3", "r"], ["s4"]),                     # a, b, c, r
        h.make_node("SequenceLength", ["s4"], ["n"]),
        h.make_node("ConcatFromSequence", ["s4"], ["y"], axis=1),
        h.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),
        h.make_node("ConcatFromSequence", ["rows"], ["stacked"], axis=-1, new_axis=1),
    ]
    m = model(nodes, [tensor("x", (3, 5))],
              [tensor("y", (3, 6)), tensor("n", (), T.INT64), tensor("stacked", (5, 3))])
    _check(m, {"x": RNG.standard_normal((3, 5)).astype(np.float32)})


def test_a_loop_that_grows_a_sequence_unrolls():
    """for i < 4: seq.append(x * i); y = concat(seq, new axis), as onnx's loop13_seq test does with a
    sequence output (which a tensorkiln model cannot return)."""
    body = h.make_graph([
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Mul", ["x", "fi"], ["xi"]),
        h.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"]), h.make_node("Identity", ["cond"], ["cond_out"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL),
                h.make_tensor_sequence_value_info("seq_in", T.FLOAT, None)],
        [tensor("cond_out", (), T.BOOL), h.make_tensor_sequence_value_info("seq_out", T.FLOAT, None)])
    nodes = [const_node("M", np.array(4, np.int64)), const_node("c", np.array(True)),
             h.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT),
             h.make_node("Loop", ["M", "c", "empty"], ["seq"], body=body),
             h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0, new_axis=1)]
    m = model(nodes, [tensor("x", (2,))], [tensor("y", (4, 2))])
    _check(m, {"x": np.array([1.5, -2], np.float32)})


def test_a_sequence_read_inside_an_if_is_captured_element_by_element():
    then = h.make_graph([h.make_node("SequenceAt", ["s", "one"], ["t"])], "then", [], [tensor("t", (2,))])
    other = h.make_graph([h.make_node("SequenceAt", ["s", "zero"], ["e"])], "else", [], [tensor("e", (2,))])
    nodes = [const_node("zero", np.array(0, np.int64)), const_node("one", np.array(1, np.int64)),
             h.make_node("Exp", ["x"], ["ex"]), h.make_node("SequenceConstruct", ["x", "ex"], ["s"]),
             h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    m = model(nodes, [tensor("x", (2,)), tensor("c", (), T.BOOL)], [tensor("y", (2,))])
    for flag in (True, False):
        _check(m, {"x": np.array([0.5, -1], np.float32), "c": np.array(flag)})


def test_optionals():
    nodes = [h.make_node("Optional", ["x"], ["o"]), h.make_node("OptionalHasElement", ["o"], ["has"]),
             h.make_node("OptionalGetElement", ["o"], ["v"]), h.make_node("Neg", ["v"], ["y"]),
             h.make_node("Optional", [], ["none"], type=h.make_tensor_type_proto(T.FLOAT, [2])),
             h.make_node("OptionalHasElement", ["none"], ["has_none"])]
    m = model(nodes, [tensor("x", (2,))],
              [tensor("has", (), T.BOOL), tensor("y", (2,)), tensor("has_none", (), T.BOOL)], opset=18)
    _check(m, {"x": np.array([3, -4], np.float32)})


def test_bad_positions_and_sequence_outputs_get_clear_errors():
    nodes = [const_node("five", np.array(5, np.int64)), h.make_node("SequenceConstruct", ["x", "x"], ["s"]),
             h.make_node("SequenceAt", ["s", "five"], ["y"])]
    with pytest.raises(ShapeError, match="position 5 is out of range for a sequence of 2"):
        from_onnx(model(nodes, [tensor("x", (2,))], [tensor("y", (2,))]))
    nodes = [h.make_node("SplitToSequence", ["x"], ["s"])]
    m = model(nodes, [tensor("x", (2,))], [h.make_tensor_sequence_value_info("s", T.FLOAT, None)])
    with pytest.raises(UnsupportedOpError, match="is a sequence or an optional"):
        from_onnx(m)


def test_sequence_at_a_position_only_the_run_knows():
    nodes = [h.make_node("Exp", ["x"], ["ex"]), h.make_node("Neg", ["x"], ["nx"]),
             h.make_node("SequenceConstruct", ["x", "ex", "nx"], ["s"]), h.make_node("SequenceAt", ["s", "p"], ["y"])]
    m = model(nodes, [tensor("x", (2, 2)), tensor("p", (), T.INT32)], [tensor("y", (2, 2))])
    x = RNG.standard_normal((2, 2)).astype(np.float32)
    lib = tk.compile(from_onnx(m), "cpu_llvm")
    for position in (0, 2, -1, -3):
        feeds = {"x": x, "p": np.array(position, np.int32)}
        want = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
        np.testing.assert_allclose(lib.run(feeds)[0], want[0], rtol=1e-6)
    with pytest.raises(tk.ir.errors.RuntimeLaunchError):
        lib.run({"x": x, "p": np.array(3, np.int32)})
