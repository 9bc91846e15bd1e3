"""RNN, LSTM and GRU imported from ONNX and compiled for cpu_llvm, against onnxruntime (and onnx's
reference evaluator for layout=1, which onnxruntime does not run). Short sequences are unrolled,
long ones run as a scan over the compiled cell (recurrent.UNROLL_LIMIT); both paths are covered."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tensorkiln as tk
from tensorkiln.frontend.onnx.converters.recurrent import UNROLL_LIMIT

from .onnx_models import model, recurrent_feeds, recurrent_model, tensor

SHORT, LONG = 5, UNROLL_LIMIT + 4


def _compare(m, feeds=None, expected=None, atol=2e-5):
    feeds = feeds or recurrent_feeds(m)
    if expected is None:
        expected = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    lib = tk.compile(m, "cpu_llvm")
    got = lib.run(feeds)
    assert len(got) == len(expected)
    for g, w in zip(got, expected):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
    return lib


def _uses_scan(lib) -> bool:
    return any("scan" in step.ops for step in lib.plan.steps)


def test_lstm_bidirectional_with_lengths_initial_states_and_peepholes_unrolled():
    m = recurrent_model("LSTM", SHORT, 3, 4, 6, direction="bidirectional", with_lengths=True, with_initial=True,
                        peepholes=True)
    assert not _uses_scan(_compare(m))


def test_gru_reverse_linear_before_reset_with_lengths_as_a_scan():
    m = recurrent_model("GRU", LONG, 3, 4, 5, direction="reverse", with_lengths=True, with_initial=True,
                        linear_before_reset=1)
    assert _uses_scan(_compare(m))


def test_rnn_and_lstm_activations_with_alpha_beta_clip_and_input_forget():
    rnn = recurrent_model("RNN", LONG, 2, 3, 4, direction="bidirectional", activations=["LeakyRelu", "HardSigmoid"],
                          activation_alpha=[0.2, 0.3], activation_beta=[0.4])
    _compare(rnn)
    lstm = recurrent_model("LSTM", SHORT, 2, 3, 4, activations=["HardSigmoid", "ScaledTanh", "Affine"],
                           activation_alpha=[0.3, 0.8, 1.5], activation_beta=[0.45, 1.2, -0.1], clip=0.9,
                           input_forget=1)
    _compare(lstm)


@pytest.mark.parametrize("kind", ["LSTM", pytest.param("GRU", marks=pytest.mark.slow)])
def test_batch_first_layout_against_onnx_reference(kind):
    from onnx.reference import ReferenceEvaluator
    m = recurrent_model(kind, SHORT, 2, 3, 4, layout=1, direction="bidirectional", with_initial=True)
    feeds = recurrent_feeds(m)
    _compare(m, feeds, ReferenceEvaluator(m).run(None, feeds), atol=1e-4)


def _lstm_language_model(vocab=20, embed=8, hidden=16, steps=12, batch=2, seed=0):
    """tokens (batch, steps) -> embedding (Gather) -> LSTM (batch_first via Transpose) -> linear logits."""
    rng = np.random.default_rng(seed)
    weights = {
        "E": rng.standard_normal((vocab, embed)), "W": rng.standard_normal((1, 4 * hidden, embed)) * 0.3,
        "R": rng.standard_normal((1, 4 * hidden, hidden)) * 0.3, "B": rng.standard_normal((1, 8 * hidden)) * 0.1,
        "Wo": rng.standard_normal((hidden, vocab)) * 0.3, "bo": rng.standard_normal(vocab) * 0.1,
    }
    inits = [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    nodes = [
        h.make_node("Gather", ["E", "tokens"], ["emb"]),                       # (batch, steps, embed)
        h.make_node("Transpose", ["emb"], ["x"], perm=[1, 0, 2]),             # (steps, batch, embed)
        h.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "y_h", "y_c"], hidden_size=hidden),
        h.make_node("Squeeze", ["y", "one"], ["ys"]),                         # (steps, batch, hidden)
        h.make_node("MatMul", ["ys", "Wo"], ["logits0"]), h.make_node("Add", ["logits0", "bo"], ["logits"]),
    ]
    inits.append(onnx.numpy_helper.from_array(np.array([1], np.int64), "one"))
    return model(nodes, [tensor("tokens", (batch, steps), T.INT64), tensor("h0", (1, batch, hidden)),
                         tensor("c0", (1, batch, hidden))],
                 [tensor("logits", (steps, batch, vocab)), tensor("y_h", (1, batch, hidden)),
                  tensor("y_c", (1, batch, hidden))], inits)


@pytest.mark.parametrize("steps", [6, LONG + 4])
def test_lstm_language_model_matches_onnxruntime(steps):
    m = _lstm_language_model(steps=steps)
    rng = np.random.default_rng(3)
    feeds = {"tokens": rng.integers(0, 20, size=(2, steps)).astype(np.int64),
             "h0": rng.standard_normal((1, 2, 16)).astype(np.float32),
             "c0": rng.standard_normal((1, 2, 16)).astype(np.float32)}
    lib = _compare(m, feeds)
    assert _uses_scan(lib) == (steps > UNROLL_LIMIT)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("steps", [SHORT, LONG])
@pytest.mark.parametrize("lengths", [False, True])
def test_every_kind_direction_and_path(kind, direction, steps, lengths):
    m = recurrent_model(kind, steps, 3, 4, 5, direction=direction, with_lengths=lengths, with_initial=True,
                        peepholes=True)
    _compare(m)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
                                        "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus"])
def test_every_activation(activation):
    m = recurrent_model("GRU", SHORT, 2, 3, 4, activations=[activation, "Tanh"], activation_alpha=[0.7],
                        activation_beta=[0.3])
    _compare(m)
