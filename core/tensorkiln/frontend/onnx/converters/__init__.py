"""Converters from ONNX op types to graph IR, one module per op family.

Each converter is `fn(node: OnnxNode) -> Expr | tuple[Expr, ...]` registered with
`@converter("OpType", ...)`.
"""
from ._registry import CONVERTERS, converter
from . import elementwise, nn, reduce, tensor  # noqa: F401,E402
from . import data_dependent, einsum, image_sampling, indexing, misc, ml, signal  # noqa: F401,E402  (issue 18's remaining operators)
from . import control_flow, recurrent, sequence  # noqa: F401,E402  (If, Loop, Scan; RNN, LSTM, GRU; sequences)
from . import quantization  # noqa: F401,E402  (QuantizeLinear, DequantizeLinear, QLinear*, *Integer)
from . import mel_weight_matrix, random, training, tree_ensemble  # noqa: F401,E402  (MelWeightMatrix; seeded random ops; ai.onnx.preview.training optimizers; ai.onnx.ml TreeEnsemble)

__all__ = ["CONVERTERS", "converter"]
