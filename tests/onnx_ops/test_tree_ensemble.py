"""ai.onnx.ml TreeEnsemble, compiled as a level-by-level traversal of all trees, matches onnx's reference
evaluator on random forests: every comparison mode, set membership, NaN routing, the four aggregates,
float32 and float64 inputs; post_transform softmax/logistic apply to the aggregate (onnxruntime's
behaviour; onnx's reference ignores the attribute)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln.ir.errors import TensorkilnError

ML = "ai.onnx.ml"


def _forest(rng, trees: int, features: int, targets: int, modes: list[int], depth: int = 4,
            dtype=np.float32) -> dict:
    """Random trees as TreeEnsemble attributes (node ids and leaf ids global, as the op expects)."""
    nodes = dict(modes=[], features=[], splits=[], true_ids=[], false_ids=[], true_leaf=[], false_leaf=[], tracks=[])
    leaves = dict(weights=[], targets=[])
    members: list[float] = []

    def build(level: int) -> tuple[int, bool]:
        if level == depth or (level > 0 and rng.random() < 0.3):
            leaves["weights"].append(float(np.round(rng.normal(), 2)))
            leaves["targets"].append(int(rng.integers(targets)))
            return len(leaves["weights"]) - 1, True
        index = len(nodes["modes"])
        mode = int(rng.choice(modes))
        for key, value in (("modes", mode), ("features", int(rng.integers(features))),
                           ("splits", float(np.round(rng.normal(), 1)) if mode != 6 else float("nan")),
                           ("tracks", int(rng.integers(2))), ("true_ids", 0), ("false_ids", 0),
                           ("true_leaf", 0), ("false_leaf", 0)):
            nodes[key].append(value)
        if mode == 6:
            # no 0.0 member: onnx's reference reads a set until a falsy value, so 0.0 would end it early
            values = np.round(rng.normal(size=3), 1)
            members.extend([float(v) if v != 0 else 0.5 for v in values] + [float("nan")])
        for side in ("true", "false"):
            child, is_leaf = build(level + 1)
            nodes[f"{side}_ids"][index], nodes[f"{side}_leaf"][index] = child, int(is_leaf)
        return index, False

    roots = [build(0)[0] for _ in range(trees)]
    return dict(nodes_modes=numpy_helper.from_array(np.array(nodes["modes"], np.uint8), "nodes_modes"),
                nodes_featureids=nodes["features"],
                nodes_splits=numpy_helper.from_array(np.array(nodes["splits"], dtype), "nodes_splits"),
                nodes_truenodeids=nodes["true_ids"], nodes_falsenodeids=nodes["false_ids"],
                nodes_trueleafs=nodes["true_leaf"], nodes_falseleafs=nodes["false_leaf"],
                nodes_missing_value_tracks_true=nodes["tracks"],
                leaf_weights=numpy_helper.from_array(np.array(leaves["weights"], dtype), "leaf_weights"),
                leaf_targetids=leaves["targets"], tree_roots=roots, n_targets=targets,
                **({"membership_values": numpy_helper.from_array(np.array(members, dtype), "members")}
                   if members else {}))


def _model(attrs: dict, features: int, targets: int, elem=TensorProto.FLOAT):
    node = helper.make_node("TreeEnsemble", ["X"], ["Y"], domain=ML, **attrs)
    graph = helper.make_graph([node], "forest", [helper.make_tensor_value_info("X", elem, [None, features])],
                              [helper.make_tensor_value_info("Y", elem, [None, targets])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)])


def _samples(rng, count: int, features: int, dtype) -> np.ndarray:
    x = np.round(rng.normal(size=(count, features)), 1).astype(dtype)   # on the splits' grid: ties happen
    x[rng.random(x.shape) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("modes, aggregate", [([0], 1), ([0, 1, 2, 3, 4, 5], 0), ([0, 1, 2, 3, 4, 5], 3),
                                              ([0, 6, 4], 1), ([6, 5], 2)],
                         ids=["leq-sum", "compares-average", "compares-max", "member-sum", "member-min"])
def test_random_forest_matches_onnx_reference(modes, aggregate):
    rng = np.random.default_rng(aggregate * 7 + len(modes))
    attrs = _forest(rng, trees=6, features=5, targets=3, modes=modes)
    model = _model({**attrs, "aggregate_function": aggregate}, 5, 3)
    x = _samples(rng, 40, 5, np.float32)
    (got,) = tk.compile(model, target="cpu_llvm", shape={"X": x.shape}).run({"X": x})
    (want,) = ReferenceEvaluator(model).run(None, {"X": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_float64_forest_and_single_leaf_tree_match_onnx_reference():
    rng = np.random.default_rng(3)
    attrs = _forest(rng, trees=3, features=4, targets=2, modes=[0, 3], dtype=np.float64)
    model = _model(attrs, 4, 2, TensorProto.DOUBLE)
    x = _samples(rng, 25, 4, np.float64)
    (got,) = tk.compile(model, target="cpu_llvm", shape={"X": x.shape}).run({"X": x})
    (want,) = ReferenceEvaluator(model).run(None, {"X": x})
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("transform, apply", [
    (1, lambda y: np.exp(y - y.max(1, keepdims=True)) / np.exp(y - y.max(1, keepdims=True)).sum(1, keepdims=True)),
    (2, lambda y: 1 / (1 + np.exp(-y)))])
def test_post_transform_applies_to_the_aggregate(transform, apply):
    rng = np.random.default_rng(5)
    attrs = _forest(rng, trees=4, features=3, targets=3, modes=[0])
    x = _samples(rng, 10, 3, np.float32)
    (raw,) = ReferenceEvaluator(_model(attrs, 3, 3)).run(None, {"X": x})
    (got,) = tk.compile(_model({**attrs, "post_transform": transform}, 3, 3), target="cpu_llvm",
                        shape={"X": x.shape}).run({"X": x})
    np.testing.assert_allclose(got, apply(raw.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_inconsistent_node_attributes_are_refused():
    attrs = _forest(np.random.default_rng(0), trees=1, features=2, targets=1, modes=[0])
    attrs["nodes_featureids"] = attrs["nodes_featureids"][:-1]
    with pytest.raises(TensorkilnError, match=r"TreeEnsemble.*nodes_\* attributes must all have \d+ entries"):
        tk.frontend.from_onnx(_model(attrs, 2, 1), shape={"X": (4, 2)})
