"""Einsum (converted to transpose / reshape / multiply / sum / where) matches numpy.einsum for
contractions, outer products, diagonals, ellipses and implicit outputs; bad subscripts are refused."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.graph.interpreter import evaluate
from tensorkiln.ir.errors import FrontendError

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]), ("i,i", [(5,), (5,)]),
    ("ij->ji", [(3, 4)]), ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]), ("ii->i", [(4, 4)]),
    ("...ii->...i", [(2, 3, 3)]), ("...ij,...jk", [(2, 1, 3, 4), (2, 5, 4, 2)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijk", [(2, 3, 4)]), ("kji,ij->k", [(2, 3, 4), (4, 3)]), ("ii", [(3, 3)]), ("i->i", [(1,)]),
]


def _model(equation: str, shapes):
    from onnx import TensorProto, helper
    names = [f"x{k}" for k in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                            for n, s in zip(names, shapes)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {f"x{k}": rng.standard_normal(s).astype("float32") for k, s in enumerate(shapes)}


@pytest.mark.parametrize("equation, shapes", CASES)
def test_einsum_matches_numpy(equation, shapes):
    feeds = _arrays(shapes)
    want = np.einsum(equation, *feeds.values())
    got = evaluate(tk.frontend.from_onnx(_model(equation, shapes)), feeds)
    got = got[0] if isinstance(got, list) else got
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("equation, shapes", [("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]), ("...ii->...i", [(2, 3, 3)])])
def test_einsum_on_cpu_llvm(equation, shapes):
    feeds = _arrays(shapes, 1)
    lib = tk.compile(tk.frontend.from_onnx(_model(equation, shapes)), target="cpu_llvm")
    np.testing.assert_allclose(lib.run(feeds)[0], np.einsum(equation, *feeds.values()), rtol=1e-5, atol=1e-5)


def test_subscripts_that_do_not_fit_are_refused():
    with pytest.raises(FrontendError, match=r"subscripts 'ijk' do not fit an operand of rank 2"):
        tk.frontend.from_onnx(_model("ijk->i", [(2, 3)]))
    with pytest.raises(FrontendError, match="names 2 operands, the node has 1"):
        tk.frontend.from_onnx(_model("ij,jk->ik", [(2, 3)]))
