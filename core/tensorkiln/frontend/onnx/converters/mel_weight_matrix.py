"""Converter for MelWeightMatrix: the (dft_length // 2 + 1, num_mel_bins) matrix of triangular mel filters.

Its five inputs are scalars that fix the output's shape, so the matrix is computed on the host once
they are known: at import when they are constants, else at run time through tk.compile's run-time
specialisation (node.const raises ValueNotStaticError, and the model is re-imported with their
values bound and cached). The arithmetic is onnx's reference's, step for step and in the inputs' own
dtypes, so the filters' edge bins round the same way.
"""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import to_numpy
from ....ir.errors import ShapeError
from ..node import OnnxNode
from ._registry import converter
from ._util import onnx_dtype


def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz) -> np.ndarray:
    """Triangular filters, evenly spaced on the mel scale (mel = 2595 log10(1 + hz / 700)), as float64."""
    num_spectrogram_bins = dft_length // 2 + 1
    frequency_bins = np.arange(0, num_mel_bins + 2)
    low_frequency_mel = 2595 * np.log1p(lower_edge_hertz / 700) / np.log(10)
    high_frequency_mel = 2595 * np.log1p(upper_edge_hertz / 700) / np.log(10)
    mel_step = (high_frequency_mel - low_frequency_mel) / frequency_bins.shape[0]
    frequency_bins = frequency_bins * mel_step + low_frequency_mel
    frequency_bins = 700 * np.expm1(frequency_bins / 2595 * np.log(10))
    edges = (((dft_length + 1) * frequency_bins) // sample_rate).astype(np.int64)
    output = np.zeros((int(num_spectrogram_bins), int(num_mel_bins)))
    for i in range(int(num_mel_bins)):
        low, center, high = (int(e) for e in edges[i:i + 3])
        if low < 0 or max(center, high - 1) >= output.shape[0]:   # the last bin the filter writes
            raise ShapeError(f"MelWeightMatrix: mel filter {i} spans DFT bins {low}..{high}, outside the "
                             f"{output.shape[0]} bins of dft_length={int(dft_length)}; check sample_rate "
                             f"({sample_rate}) and the edge frequencies ({lower_edge_hertz}, {upper_edge_hertz} Hz)")
        if center == low:
            output[center, i] = 1
        else:
            output[low:center + 1, i] = (np.arange(low, center + 1) - low) / float(center - low)
        if high > center:
            output[center:high, i] = (high - np.arange(center, high)) / float(high - center)
    return output


@converter("MelWeightMatrix")
def _mel_weight_matrix(node: OnnxNode) -> Expr:
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    values = [np.asarray(node.const(i, name)).reshape(()) for i, name in enumerate(names)]
    num_mel_bins, dft_length = int(values[0]), int(values[1])
    if num_mel_bins <= 0 or dft_length <= 0 or float(values[2]) <= 0:
        raise ShapeError(f"ONNX node {node.name!r} (MelWeightMatrix): num_mel_bins={num_mel_bins}, "
                         f"dft_length={dft_length} and sample_rate={values[2]} must be positive")
    node.check_fits((dft_length // 2 + 1, num_mel_bins), "float64", "the mel weight matrix")
    dtype = onnx_dtype(node.attr("output_datatype", 1), node)
    return Constant(mel_weight_matrix(*values).astype(to_numpy(dtype)))
