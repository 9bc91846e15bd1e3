"""Sequences and optionals as graph inputs and outputs (frontend/onnx/structured.py, runtime/specialize.py):
tk.compile specialises on each value's structure (a sequence's length and element shapes, an optional's
presence); run() takes lists of arrays and None, and returns lists and None. Checked against onnx's
reference evaluator and, where it runs the case, onnxruntime."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln.frontend import from_onnx
from tensorkiln.ir.errors import RuntimeLaunchError, UnsupportedOpError

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = h.make_graph(nodes, "sequence_values", inputs, outputs, initializer=list(initializers))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])


def _sequence(name, shape=None, elem=T.FLOAT):
    return h.make_tensor_sequence_value_info(name, elem, shape)


def _optional_tensor(name, shape, elem=T.FLOAT):
    return h.make_value_info(name, h.make_optional_type_proto(h.make_tensor_type_proto(elem, shape)))


def _assert_same(got, want):
    """An output against the reference's: None with None, lists element by element, arrays exactly typed."""
    if want is None:
        assert got is None
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _check(model, feeds, lib=None, with_ort=True, with_reference=True):
    """Run `model` on `feeds` with tk.compile (or `lib`) and compare with the reference evaluator and onnxruntime."""
    lib = lib or tk.compile(model, "cpu_llvm")
    got = lib.run(feeds)
    if with_reference:
        want = ReferenceEvaluator(model).run(None, feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, [np.asarray(x) for x in w] if isinstance(w, list) else w)
    if with_ort:
        for g, w in zip(got, ort.InferenceSession(model.SerializeToString()).run(None, feeds)):
            _assert_same(g, w)
    return lib


def _elements(*shapes):
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


def test_sequence_input_read_by_at_concat_and_length_specialises_per_length():
    nodes = [h.make_node("SequenceAt", ["seq", "last"], ["at"]),
             h.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
             h.make_node("SequenceLength", ["seq"], ["n"])]
    m = _model(nodes, [_sequence("seq", ["k", 3])],
               [h.make_tensor_value_info("at", T.FLOAT, None), h.make_tensor_value_info("cat", T.FLOAT, None),
                h.make_tensor_value_info("n", T.INT64, [])],
               [h.make_tensor("last", T.INT64, [], [-1])])
    lib = _check(m, {"seq": _elements((2, 3), (1, 3))})
    _check(m, {"seq": _elements((2, 3), (4, 3), (1, 3))}, lib)
    _check(m, {"seq": _elements((2, 3), (1, 3))}, lib)   # the first structure again: from the cache
    info = lib.cache_info()
    assert info["compiles"] == 2 and info["hits"] == 1


def test_sequence_at_a_position_given_at_run_time():
    m = _model([h.make_node("SequenceAt", ["seq", "p"], ["y"])],
               [_sequence("seq", [2]), h.make_tensor_value_info("p", T.INT64, [])],
               [h.make_tensor_value_info("y", T.FLOAT, [2])])
    lib = tk.compile(m, "cpu_llvm")
    seq = _elements((2,), (2,), (2,))
    for position in (0, 2, -2):
        _check(m, {"seq": seq, "p": np.array(position, np.int64)}, lib)


def test_split_to_sequence_output_is_a_list():
    m = _model([h.make_node("SplitToSequence", ["x", "split"], ["seq"], axis=1)],
               [h.make_tensor_value_info("x", T.FLOAT, [3, 5])], [_sequence("seq")],
               [h.make_tensor("split", T.INT64, [3], [1, 3, 1])])
    lib = _check(m, {"x": _elements((3, 5))[0]})
    assert [a.shape for a in lib.run({"x": _elements((3, 5))[0]})[0]] == [(3, 1), (3, 3), (3, 1)]


def test_split_to_sequence_with_a_run_time_chunk_size():
    m = _model([h.make_node("SplitToSequence", ["x", "chunk"], ["seq"], axis=0)],
               [h.make_tensor_value_info("x", T.FLOAT, [7, 2]), h.make_tensor_value_info("chunk", T.INT64, [])],
               [_sequence("seq")])
    lib = tk.compile(m, "cpu_llvm")
    x = _elements((7, 2))[0]
    for chunk in (3, 2):
        _check(m, {"x": x, "chunk": np.array(chunk, np.int64)}, lib)


def test_sequence_in_sequence_out_with_elements_of_different_shapes():
    nodes = [h.make_node("SequenceInsert", ["seq", "x"], ["longer"]),
             h.make_node("SequenceErase", ["longer", "zero"], ["out"])]
    m = _model(nodes, [_sequence("seq", ["n"]), h.make_tensor_value_info("x", T.FLOAT, ["m"])],
               [_sequence("out", ["n"])], [h.make_tensor("zero", T.INT64, [], [0])])
    lib = _check(m, {"seq": _elements((2,), (5,)), "x": _elements((3,))[0]})
    _check(m, {"seq": _elements((4,)), "x": _elements((1,))[0]}, lib)


def test_an_empty_sequence_input():
    nodes = [h.make_node("SequenceInsert", ["seq", "x"], ["out"]), h.make_node("SequenceLength", ["seq"], ["n"])]
    m = _model(nodes, [_sequence("seq", [2]), h.make_tensor_value_info("x", T.FLOAT, [2])],
               [_sequence("out", [2]), h.make_tensor_value_info("n", T.INT64, [])])
    _check(m, {"seq": [], "x": _elements((2,))[0]}, with_ort=False)   # onnxruntime takes no empty sequence


def test_optional_tensor_input_present_and_absent():
    doubled = h.make_graph([h.make_node("OptionalGetElement", ["opt"], ["x"]), h.make_node("Add", ["x", "x"], ["y"])],
                           "then", [], [h.make_tensor_value_info("y", T.FLOAT, [4])])
    zeros = h.make_graph([h.make_node("Constant", [], ["z"], value=h.make_tensor("v", T.FLOAT, [4], [0] * 4))],
                         "else", [], [h.make_tensor_value_info("z", T.FLOAT, [4])])
    nodes = [h.make_node("OptionalHasElement", ["opt"], ["has"]),
             h.make_node("If", ["has"], ["value"], then_branch=doubled, else_branch=zeros)]
    m = _model(nodes, [_optional_tensor("opt", [4])],
               [h.make_tensor_value_info("has", T.BOOL, []), h.make_tensor_value_info("value", T.FLOAT, [4])])
    lib = tk.compile(m, "cpu_llvm")
    # onnxruntime's python API takes no None for an optional input, so the reference evaluator judges both
    _check(m, {"opt": _elements((4,))[0]}, lib, with_ort=False)
    _check(m, {"opt": None}, lib, with_ort=False)
    assert lib.cache_info()["compiles"] == 2


def test_optional_output_is_none_when_empty():
    # the reference evaluator cannot return an empty optional; ONNX's Identity passes it on as it is
    m = _model([h.make_node("Identity", ["opt"], ["same"])], [_optional_tensor("opt", [3])],
               [_optional_tensor("same", [3])])
    lib = tk.compile(m, "cpu_llvm")
    x = _elements((3,))[0]
    np.testing.assert_array_equal(lib.run({"opt": x})[0], x)
    assert lib.run({"opt": None}) == [None]


def test_optional_sequence_input_chooses_a_branch_at_run_time():
    # an optional sequence: its length when present, -1 when absent (If on OptionalHasElement)
    length = h.make_graph([h.make_node("OptionalGetElement", ["opt"], ["seq"]),
                           h.make_node("SequenceLength", ["seq"], ["n"])], "then", [],
                          [h.make_tensor_value_info("n", T.INT64, [])])
    minus_one = h.make_graph([h.make_node("Constant", [], ["m"], value=h.make_tensor("v", T.INT64, [], [-1]))],
                             "else", [], [h.make_tensor_value_info("m", T.INT64, [])])
    nodes = [h.make_node("OptionalHasElement", ["opt"], ["has"]),
             h.make_node("If", ["has"], ["n"], then_branch=length, else_branch=minus_one)]
    opt_type = h.make_optional_type_proto(h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, [2])))
    m = _model(nodes, [h.make_value_info("opt", opt_type)], [h.make_tensor_value_info("n", T.INT64, [])])
    lib = tk.compile(m, "cpu_llvm")
    for value in (_elements((2,), (2,), (2,)), None, _elements((2,))):
        _check(m, {"opt": value}, lib, with_ort=False)


def test_if_whose_branches_produce_sequences_specialises_on_the_condition():
    then = h.make_graph([h.make_node("SequenceConstruct", ["x", "x"], ["s"])], "then", [], [_sequence("s")])
    other = h.make_graph([h.make_node("SplitToSequence", ["x"], ["s2"], axis=0)], "else", [], [_sequence("s2")])
    m = _model([h.make_node("If", ["cond"], ["out"], then_branch=then, else_branch=other)],
               [h.make_tensor_value_info("cond", T.BOOL, []), h.make_tensor_value_info("x", T.FLOAT, [3, 2])],
               [_sequence("out")])
    lib = tk.compile(m, "cpu_llvm")
    x = _elements((3, 2))[0]
    for cond in (True, False, True):
        _check(m, {"cond": np.array(cond), "x": x}, lib)
    assert lib.cache_info()["compiles"] == 2


def test_loop_carrying_a_sequence_with_a_run_time_trip_count():
    # each iteration appends x * i to the carried sequence
    body = h.make_graph(
        [h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Mul", ["x", "fi"], ["xi"]),
         h.make_node("SequenceInsert", ["seq_in", "xi"], ["seq_out"]), h.make_node("Identity", ["c"], ["c_out"])],
        "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
                 _sequence("seq_in")],
        [h.make_tensor_value_info("c_out", T.BOOL, []), _sequence("seq_out")])
    nodes = [h.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT),
             h.make_node("Loop", ["trip", "", "empty"], ["result"], body=body)]
    m = _model(nodes, [h.make_tensor_value_info("trip", T.INT64, []), h.make_tensor_value_info("x", T.FLOAT, [2])],
               [_sequence("result")])
    lib = tk.compile(m, "cpu_llvm")
    x = _elements((2,))[0]
    for trip in (3, 1):
        # onnx's reference evaluator returns an empty sequence from this Loop (onnx 1.x); onnxruntime judges it
        _check(m, {"trip": np.array(trip, np.int64), "x": x}, lib, with_reference=False)
    assert [a.tolist() for a in lib.run({"trip": np.array(2, np.int64), "x": x})[0]] == [(x * 0).tolist(), x.tolist()]


def test_sequence_map_over_a_sequence_input():
    body = h.make_graph([h.make_node("Add", ["e", "t"], ["r"]), h.make_node("Shape", ["e"], ["s"])], "body",
                        [h.make_tensor_value_info("e", T.FLOAT, ["n"]), h.make_tensor_value_info("t", T.FLOAT, [1])],
                        [h.make_tensor_value_info("r", T.FLOAT, ["n"]), h.make_tensor_value_info("s", T.INT64, [1])])
    m = _model([h.make_node("SequenceMap", ["seq", "t"], ["added", "shapes"], body=body)],
               [_sequence("seq", ["n"]), h.make_tensor_value_info("t", T.FLOAT, [1])],
               [_sequence("added", ["n"]), _sequence("shapes", [1], T.INT64)])
    _check(m, {"seq": _elements((3,), (5,)), "t": _elements((1,))[0]}, with_ort=False)


def test_the_standard_backend_protocol_takes_lists_and_returns_lists():
    from tensorkiln.onnx_backend import backend_for
    m = _model([h.make_node("SequenceConstruct", ["a", "b"], ["s"]), h.make_node("Identity", ["seq"], ["same"])],
               [h.make_tensor_value_info("a", T.FLOAT, [2]), h.make_tensor_value_info("b", T.FLOAT, [2]),
                _sequence("seq", [1])],
               [_sequence("s", [2]), _sequence("same", [1])])
    a, b, c = _elements((2,), (2,), (1,))
    got = backend_for("cpu_llvm").prepare(m).run([a, b, [c, c]])
    want = ReferenceEvaluator(m).run(None, {"a": a, "b": b, "seq": [c, c]})
    for g, w in zip(got, want):
        _assert_same(g, list(w))


def test_bad_structured_values_get_clear_errors():
    m = _model([h.make_node("SequenceLength", ["seq"], ["n"])], [_sequence("seq", [2])],
               [h.make_tensor_value_info("n", T.INT64, [])])
    lib = tk.compile(m, "cpu_llvm")
    with pytest.raises(RuntimeLaunchError, match=r"input 'seq' is a sequence of float32\(2\): pass a list of arrays"):
        lib.run({"seq": np.zeros(2, np.float32)})
    with pytest.raises(RuntimeLaunchError, match=r"input 'seq'\[1\] has dtype int32, expected float32"):
        lib.run({"seq": [np.zeros(2, np.float32), np.zeros(2, np.int32)]})
    with pytest.raises(tk.ir.errors.ShapeError, match=r"input 'seq'\[0\] has shape \(3,\)"):
        lib.run({"seq": [np.zeros(3, np.float32)]})
    opt = _model([h.make_node("OptionalHasElement", ["opt"], ["has"])], [_optional_tensor("opt", [2])],
                 [h.make_tensor_value_info("has", T.BOOL, [])])
    with pytest.raises(RuntimeLaunchError, match=r"input 'opt' is an optional float32\(2\): pass an array or None"):
        tk.compile(opt, "cpu_llvm").run({"opt": [np.zeros(2, np.float32)]})


def test_sequences_of_sequences_and_maps_are_refused_by_name():
    nested = h.make_value_info("nested", h.make_sequence_type_proto(h.make_sequence_type_proto(
        h.make_tensor_type_proto(T.FLOAT, [2]))))
    m = _model([h.make_node("SequenceLength", ["nested"], ["n"])], [nested],
               [h.make_tensor_value_info("n", T.INT64, [])])
    with pytest.raises(UnsupportedOpError, match=r"graph input 'nested' .*only sequences of tensors"):
        tk.compile(m, "cpu_llvm")


def test_from_onnx_names_the_sequence_output_and_its_length():
    from tensorkiln.frontend.onnx.converters.sequence import SequenceOutputError
    m = _model([h.make_node("SplitToSequence", ["x"], ["s"])], [h.make_tensor_value_info("x", T.FLOAT, [3])],
               [_sequence("s")])
    with pytest.raises(SequenceOutputError, match=r"graph output\(s\) 's' \(a sequence of 3\)") as error:
        from_onnx(m)
    assert error.value.structure == {"s": 3}


def test_the_compile_command_refuses_to_package_a_sequence_input(tmp_path):
    import onnx

    from tensorkiln.cli import main
    m = _model([h.make_node("SequenceLength", ["seq"], ["n"])], [_sequence("seq", [2])],
               [h.make_tensor_value_info("n", T.INT64, [])])
    onnx.save(m, tmp_path / "seq.onnx")
    with pytest.raises(SystemExit, match="takes a sequence or an optional, which a package cannot hold"):
        main(["compile", str(tmp_path / "seq.onnx")])


def test_an_unsupported_op_is_an_error_of_compile_not_of_the_first_run():
    m = _model([h.make_node("SequenceAt", ["seq", "zero"], ["x"]), h.make_node("Bogus", ["x"], ["y"], domain="acme")],
               [_sequence("seq", [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])],
               [h.make_tensor("zero", T.INT64, [], [0])])
    m.opset_import.append(h.make_opsetid("acme", 1))
    with pytest.raises(UnsupportedOpError, match="acme::Bogus"):
        tk.compile(m, "cpu_llvm")
