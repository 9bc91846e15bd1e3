"""Converters for ONNX's random ops: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike,
Bernoulli, and the random mask of Dropout in training mode.

A seeded random op draws its numbers from numpy's RandomState(seed), as onnx's reference
implementation does, and like it draws the same numbers on every run: the shape is static, so
the draw is a constant of the compiled model. An op without a seed must draw new numbers on
each run, which needs a random source at run time that the compiled graph does not have; it is
refused with that reason.
"""
from __future__ import annotations

import math

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import to_numpy
from ....ir.errors import FrontendError
from ..node import OnnxNode
from ._registry import converter
from ._util import onnx_dtype, scalar

__all__ = ["seeded_state"]


def seeded_state(node: OnnxNode) -> np.random.RandomState:
    """numpy's RandomState for the node's `seed` attribute; refuse a node without one."""
    seed = node.attr("seed")
    if seed is None or math.isnan(seed):
        raise node.unsupported("no seed attribute: each run must draw new random numbers, and compiled models "
                               "hold no random source at run time; give the node a seed (its numbers are then "
                               "drawn once, from numpy's RandomState(seed) as in onnx's reference)")
    return np.random.RandomState(seed=int(seed))


def _dtype(node: OnnxNode, like: Expr | None) -> str:
    if node.attr("dtype") is not None:
        return onnx_dtype(node.attr("dtype"), node)
    return like.dtype if like is not None else "float32"


def _uniform(node: OnnxNode, shape: tuple[int, ...], dtype: str) -> Constant:
    node.check_fits(shape, dtype, "random values")
    numpy_dtype = to_numpy(dtype)
    values = seeded_state(node).rand(*shape).astype(numpy_dtype)
    values *= numpy_dtype.type(node.attr("high", 1.0) - node.attr("low", 0.0))
    values += numpy_dtype.type(node.attr("low", 0.0))
    return Constant(values)


def _normal(node: OnnxNode, shape: tuple[int, ...], dtype: str) -> Constant:
    node.check_fits(shape, dtype, "random values")
    numpy_dtype = to_numpy(dtype)
    values = seeded_state(node).randn(*shape).astype(numpy_dtype)
    values *= numpy_dtype.type(node.attr("scale", 1.0))
    values += numpy_dtype.type(node.attr("mean", 0.0))
    return Constant(values)


@converter("RandomUniform")
def _random_uniform(node: OnnxNode) -> Expr:
    return _uniform(node, tuple(int(d) for d in node.attr("shape")), _dtype(node, None))


@converter("RandomNormal")
def _random_normal(node: OnnxNode) -> Expr:
    return _normal(node, tuple(int(d) for d in node.attr("shape")), _dtype(node, None))


@converter("RandomUniformLike")
def _random_uniform_like(node: OnnxNode) -> Expr:
    like = node.required(0)
    return _uniform(node, tuple(like.shape), _dtype(node, like))


@converter("RandomNormalLike")
def _random_normal_like(node: OnnxNode) -> Expr:
    like = node.required(0)
    return _normal(node, tuple(like.shape), _dtype(node, like))


@converter("Bernoulli")
def _bernoulli(node: OnnxNode) -> Expr:
    """1 where a uniform draw falls below the probability. (onnx's function body for Bernoulli keeps
    uniform > p, which draws 1 with probability 1 - p; onnx's reference and onnxruntime draw with p.)"""
    probability = node.required(0)
    node.check_fits(tuple(probability.shape), "float64", "random values")
    draw = seeded_state(node).rand(*probability.shape).astype(to_numpy(probability.dtype))
    hit = node.call("less", Constant(draw), probability)
    return node.call("cast", hit, dtype=_dtype(node, probability))


def dropout_training(node: OnnxNode, data: Expr, ratio: float) -> tuple[Expr, Expr]:
    """Dropout's output and mask in training mode: keep where uniform(0, 1) >= ratio (onnx's reference
    draws with RandomState(seed)), scaled by 1 / (1 - ratio)."""
    if not 0.0 <= ratio < 1.0:
        raise FrontendError(f"ONNX node {node.name!r} (Dropout): ratio={ratio} must be in [0, 1) in training mode")
    state = seeded_state(node)
    node.check_fits(tuple(data.shape), "float64", "dropout's random draw")
    keep = state.uniform(0, 1.0, tuple(data.shape)) >= ratio
    scale = scalar(1.0 / (1.0 - ratio), data.dtype)
    kept = node.call("multiply", data, scale)
    return node.call("where", Constant(keep), kept, scalar(0, data.dtype)), Constant(keep)
