"""Converter for ai.onnx.ml TreeEnsemble: compiled as a traversal of every tree at once, one step per level.

The trees become tables indexed by node (internal nodes first, then one entry per leaf): feature,
split, comparison mode, NaN policy and the next node on either outcome; a leaf points to itself.
The state is the current node of each (sample, tree) pair, [N, trees]. A level gathers the feature
values at those nodes (gather_elements), compares them with the splits (in float64, as onnx's reference
compares Python floats), and moves to the true or the false child (take of the tables). After
`depth` levels every pair sits on its leaf, whose weight goes to its target column, aggregated
over the trees. The work is O(N * trees * depth), the usual data-parallel tree traversal, and
the graph has O(depth) calls whatever the number of trees.
"""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import to_numpy
from ....ir.errors import FrontendError
from ..node import OnnxNode
from ._registry import converter
from ._util import scalar

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_COMPARE = {_LEQ: "less_equal", _LT: "less", _GTE: "greater_equal", _GT: "greater", _EQ: "equal",
            _NEQ: "not_equal"}
_SUM, _AVERAGE, _MIN, _MAX = 1, 0, 2, 3


class _Tables:
    """Per-node arrays of the ensemble, leaves appended after the internal nodes."""

    def __init__(self, node: OnnxNode):
        def ints(name):
            return np.asarray(node.attr(name, []), dtype=np.int64).reshape(-1)
        self.name = node.name
        modes = ints("nodes_modes")
        count = len(modes)
        self.leaf_weights = np.asarray(node.attr("leaf_weights"), dtype=np.float64).reshape(-1)
        self.leaf_targets = ints("leaf_targetids")
        leaves = len(self.leaf_weights)
        true_ids, false_ids = ints("nodes_truenodeids"), ints("nodes_falsenodeids")
        true_leaf, false_leaf = ints("nodes_trueleafs").astype(bool), ints("nodes_falseleafs").astype(bool)
        features = ints("nodes_featureids")
        splits = np.asarray(node.attr("nodes_splits"), dtype=np.float64).reshape(-1)
        tracks = ints("nodes_missing_value_tracks_true") if node.attr("nodes_missing_value_tracks_true") is not None \
            else np.zeros(count, np.int64)
        lengths = {len(a) for a in (true_ids, false_ids, true_leaf, false_leaf, features, splits, tracks)}
        if lengths != {count} or len(self.leaf_targets) != leaves:
            raise FrontendError(f"ONNX node {node.name!r} (TreeEnsemble): the nodes_* attributes must all have "
                                f"{count} entries (one per node) and leaf_targetids {leaves} (one per leaf weight)")
        self.count, self.leaves = count, leaves
        total = count + leaves
        self.modes = np.concatenate([modes, np.full(leaves, _LEQ)])
        self.features = np.concatenate([features, np.zeros(leaves, np.int64)])
        self.splits = np.concatenate([splits, np.zeros(leaves)])
        self.tracks = np.concatenate([tracks, np.zeros(leaves, np.int64)]).astype(bool)
        own = np.arange(count, total)
        self.true_next = np.concatenate([np.where(true_leaf, count + true_ids, true_ids), own])
        self.false_next = np.concatenate([np.where(false_leaf, count + false_ids, false_ids), own])
        if ((self.true_next < 0) | (self.true_next >= total) | (self.false_next < 0) | (self.false_next >= total)).any():
            raise FrontendError(f"ONNX node {node.name!r} (TreeEnsemble): a child id is outside the {count} nodes "
                                f"or {leaves} leaves")
        self.members = self._members(node, modes)
        roots = ints("tree_roots")
        # a tree that is a single leaf: the root's both children are the same leaf (onnx's reference)
        single = true_leaf[roots] & false_leaf[roots] & (true_ids[roots] == false_ids[roots])
        self.roots = np.where(single, count + roots, roots)
        self.depth = self._depth()

    def _members(self, node: OnnxNode, modes: np.ndarray) -> np.ndarray | None:
        """[nodes, k] set members of each MEMBER node (NaN padding); None when no node tests membership."""
        if not (modes == _MEMBER).any():
            return None
        values = node.attr("membership_values")
        if values is None:
            raise FrontendError(f"ONNX node {node.name!r} (TreeEnsemble): set-membership nodes (mode 6) need "
                                "membership_values")
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        sets = np.split(values, np.flatnonzero(np.isnan(values)) + 1)[:-1]   # each set ends with a NaN
        if len(sets) != int((modes == _MEMBER).sum()):
            raise FrontendError(f"ONNX node {node.name!r} (TreeEnsemble): membership_values holds {len(sets)} "
                                f"NaN-terminated sets for {int((modes == _MEMBER).sum())} set-membership nodes")
        width = max(1, max(len(s) - 1 for s in sets))
        table = np.full((self.count + self.leaves, width), np.nan)
        for index, members in zip(np.flatnonzero(modes == _MEMBER), sets):
            table[index, :len(members) - 1] = members[:-1]
        return table

    def _depth(self) -> int:
        """Levels until every tree reaches a leaf; a cycle among the nodes is an error."""
        depth, frontier, seen = 0, set(int(r) for r in self.roots if r < self.count), 0
        while frontier:
            depth += 1
            seen += len(frontier)
            if seen > self.count * max(1, len(self.roots)):
                raise FrontendError(f"ONNX node {self.name!r} (TreeEnsemble): the nodes form a cycle")
            frontier = {int(n) for i in frontier for n in (self.true_next[i], self.false_next[i]) if n < self.count}
        return depth


def _traverse(node: OnnxNode, tables: _Tables, data: Expr) -> Expr:
    """The leaf index each (sample, tree) pair reaches: [N, trees] int64."""
    call = node.call
    samples = data.shape[0]
    state = call("broadcast_to", Constant(tables.roots), shape=(samples, len(tables.roots)))
    features64 = call("cast", data, dtype="float64")
    modes_used = sorted(set(int(m) for m in tables.modes[:tables.count]))
    for _ in range(tables.depth):
        value = call("gather_elements", features64, call("take", Constant(tables.features), state, axis=0), axis=1)
        split = call("take", Constant(tables.splits), state, axis=0)
        mode = call("take", Constant(tables.modes), state, axis=0) if len(modes_used) > 1 else None
        taken = None
        for kind in modes_used:
            if kind == _MEMBER:
                members = call("take", Constant(tables.members), state, axis=0)
                equal = call("cast", call("equal", call("expand_dims", value, axis=2), members), dtype="int32")
                hit = call("greater", call("max", equal, axis=(2,)), scalar(0, "int32"))
            else:
                hit = call(_COMPARE[kind], value, split)
            if mode is None:
                taken = hit
            else:
                is_kind = call("equal", mode, scalar(kind, "int64"))
                taken = call("logical_and", is_kind, hit) if taken is None else \
                    call("where", is_kind, hit, taken)
        if tables.tracks.any():
            missing = call("logical_and", call("isnan", value), call("take", Constant(tables.tracks), state, axis=0))
            taken = call("logical_or", taken, missing)
        state = call("where", taken, call("take", Constant(tables.true_next), state, axis=0),
                     call("take", Constant(tables.false_next), state, axis=0))
    return call("subtract", state, scalar(tables.count, "int64"))


@converter("ai.onnx.ml::TreeEnsemble")
def _tree_ensemble(node: OnnxNode) -> Expr:
    data = node.required(0)
    if len(data.shape) != 2:
        raise FrontendError(f"ONNX node {node.name!r} (TreeEnsemble): X must be [N, features], got {tuple(data.shape)}")
    tables = _Tables(node)
    targets = int(node.attr("n_targets"))
    aggregate = node.attr("aggregate_function", _SUM)
    transform = node.attr("post_transform", 0)
    if aggregate not in (_SUM, _AVERAGE, _MIN, _MAX):
        raise FrontendError(f"ONNX node {node.name!r} (TreeEnsemble): aggregate_function={aggregate} is not one "
                            "of 0 (average), 1 (sum), 2 (min), 3 (max)")
    if transform not in (0, 1, 2):
        raise node.unsupported(f"post_transform={transform} (3: softmax_zero, 4: probit) is not implemented; "
                               "0 (none), 1 (softmax) and 2 (logistic) are")
    leaf = _traverse(node, tables, data)
    call = node.call
    weight = call("take", Constant(tables.leaf_weights), leaf, axis=0)                         # [N, trees]
    target = call("take", Constant(tables.leaf_targets), leaf, axis=0)
    is_target = call("equal", call("expand_dims", target, axis=2), Constant(np.arange(targets, dtype=np.int64)))
    weight = call("expand_dims", weight, axis=2)                                                   # [N, trees, 1]
    if aggregate in (_SUM, _AVERAGE):
        total = call("sum", call("where", is_target, weight, scalar(0.0, "float64")), axis=(1,))
        if aggregate == _AVERAGE:
            total = call("divide", total, scalar(float(len(tables.roots)), "float64"))
    else:   # a target no tree reaches keeps the dtype's extreme, as onnx's reference
        info = np.finfo(to_numpy(data.dtype))
        extreme = float(info.max if aggregate == _MIN else info.min)
        total = call("min" if aggregate == _MIN else "max",
                     call("where", is_target, weight, scalar(extreme, "float64")), axis=(1,))
    result = call("cast", total, dtype=data.dtype)
    if transform == 1:
        return call("nn.softmax", result, axis=1)
    if transform == 2:
        return call("sigmoid", result)
    return result
