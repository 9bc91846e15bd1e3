"""onnx's "simple" sequence models (test_sequence_model1..8: SequenceEmpty/Construct/Insert/Erase/At,
SplitToSequence, SequenceLength, ConcatFromSequence with positions as graph inputs) with their
stored data, through onnx's standard backend protocol (prepare(model), run(list)) on cpu_llvm."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "simple")


def _data_sets(folder: str):
    for data_set in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        inputs = [numpy_helper.to_array(onnx.load_tensor(f)) for f in sorted(glob.glob(f"{data_set}/input_*.pb"))]
        outputs = [numpy_helper.to_array(onnx.load_tensor(f)) for f in sorted(glob.glob(f"{data_set}/output_*.pb"))]
        yield inputs, outputs


@pytest.mark.parametrize("number", [3, 7, *(pytest.param(n, marks=pytest.mark.slow) for n in (1, 2, 4, 5, 6))])
def test_sequence_model_through_the_standard_protocol(number):
    from tensorkiln.onnx_backend import backend_for
    folder = os.path.join(DATA, f"test_sequence_model{number}")
    if not os.path.isdir(folder):
        pytest.skip(f"this onnx has no {folder}")
    rep = backend_for("cpu_llvm").prepare(onnx.load(os.path.join(folder, "model.onnx")))
    checked = 0
    for inputs, outputs in _data_sets(folder):
        got = rep.run(inputs)
        assert len(got) == len(outputs)
        for g, w in zip(got, outputs):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            checked += 1
    assert checked
