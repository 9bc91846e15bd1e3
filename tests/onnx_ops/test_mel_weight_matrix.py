"""MelWeightMatrix matches onnx's reference evaluator, with its scalar parameters as run-time graph inputs
(run-time specialisation computes the matrix per parameter set) and as constants."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln.ir.errors import ShapeError

NAMES = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def _model(output_datatype=None):
    kinds = [TensorProto.INT64, TensorProto.INT64, TensorProto.INT64, TensorProto.FLOAT, TensorProto.FLOAT]
    attrs = {} if output_datatype is None else dict(output_datatype=output_datatype)
    node = helper.make_node("MelWeightMatrix", list(NAMES), ["w"], **attrs)
    graph = helper.make_graph([node], "mel", [helper.make_tensor_value_info(n, k, []) for n, k in zip(NAMES, kinds)],
                              [helper.make_tensor_value_info("w", output_datatype or TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(bins, dft, rate, low, high):
    return {"num_mel_bins": np.array(bins, np.int64), "dft_length": np.array(dft, np.int64),
            "sample_rate": np.array(rate, np.int64), "lower_edge_hertz": np.array(low, np.float32),
            "upper_edge_hertz": np.array(high, np.float32)}


@pytest.mark.parametrize("output_datatype", [None, TensorProto.DOUBLE])
def test_mel_weight_matrix_with_run_time_parameters_matches_onnx_reference(output_datatype):
    model = _model(output_datatype)
    compiled = tk.compile(model, target="cpu_llvm")
    for params in [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 7600.0), (3, 64, 22050, 300.0, 3000.0)]:
        feeds = _feeds(*params)
        (got,) = compiled.run(feeds)
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        assert got.shape == want.shape == (params[1] // 2 + 1, params[0]) and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=str(params))


def test_mel_weight_matrix_outside_the_dft_bins_is_refused():
    # an upper edge far above the Nyquist frequency needs bins the DFT does not have
    with pytest.raises(ShapeError, match=r"MelWeightMatrix: mel filter \d+ spans DFT bins .* outside the 9 bins"):
        tk.frontend.from_onnx(_model(), constants=_feeds(8, 16, 8192, 0.0, 40000.0))
