"""ToMixedPrecision: the seed's example (section 1.2), region-boundary casts, fp32 islands, bfloat16."""
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph as g
from tensorkiln.graph import Call, post_order
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.passes import PassContext, to_mixed_precision
from tensorkiln.passes.mixed_precision import DEFAULT_POLICY


def _seed_network():
    # def original_network(data, weight): conv = relay.nn.conv2d(data, weight); return conv
    data = g.var("data", (1, 3, 16, 16))
    weight = g.var("weight", (8, 3, 3, 3))
    return data, weight, g.Module.from_expr(g.nn.conv2d(data, weight))


def _ops(mod):
    return [n.op.name for n in post_order(mod.main.body) if isinstance(n, Call)]


def test_seed_example_becomes_exactly_cast_conv2d_cast():
    data, weight, mod = _seed_network()
    converted = to_mixed_precision(mod, "float16")
    # def optimized_network(data, weight): the seed's hand-written result
    data_fp16 = g.cast(data, "float16")
    weight_fp16 = g.cast(weight, "float16")
    expected = g.Module.from_expr(g.cast(g.nn.conv2d(data_fp16, weight_fp16), "float32"))
    assert g.structural_equal(converted.main.body, expected.main.body)
    assert converted.main.params == mod.main.params


@pytest.mark.parametrize("opt_level", [1, 3])
def test_seed_example_compiles_and_runs_within_fp16_tolerance(opt_level):
    _, _, mod = _seed_network()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    lib = tk.compile(to_mixed_precision(mod, "float16"), "cpu_llvm", opt_level=opt_level)
    out = lib.run([x, w])[0]
    reference = g.evaluate(mod, {"data": x, "weight": w})
    assert out.dtype == np.float32
    # fp16 inputs (relative error 2^-11 each) and a 27-term fp32 accumulation
    np.testing.assert_allclose(out, reference, rtol=1e-2, atol=1e-2 * np.abs(reference).max())
    assert not np.array_equal(out, reference)   # the conv really ran on rounded inputs


def _block():
    """conv -> bias add -> relu -> (+ x) -> softmax -> reshape -> dense: an fp32 island in the middle."""
    rng = np.random.default_rng(1)
    x = g.var("x", (1, 8, 8, 8))
    conv = g.nn.conv2d(x, g.const(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2), padding=1)
    y = g.nn.relu(g.nn.bias_add(conv, g.const(rng.standard_normal(8).astype(np.float32)))) + x
    y = g.nn.softmax(y)
    y = g.nn.dense(g.reshape(y, (1, 512)), g.const(rng.standard_normal((10, 512)).astype(np.float32)))
    return g.Module.from_expr(y)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_casts_only_at_region_boundaries_and_softmax_stays_float32(dtype):
    mod = to_mixed_precision(_block(), dtype)
    calls = [n for n in post_order(mod.main.body) if isinstance(n, Call)]
    by_op = {c.op.name: c for c in calls}
    for name in ("nn.conv2d", "nn.bias_add", "nn.relu", "add", "nn.dense"):
        assert by_op[name].checked_type.dtype == dtype, name
    assert by_op["nn.softmax"].checked_type.dtype == "float32"
    assert by_op["reshape"].checked_type.dtype == "float32"   # follows its fp32 producer
    casts = [c for c in calls if c.op.name == "cast"]
    # x down (shared by the conv and the residual add), up before softmax, down before dense, up at the end
    assert [c.attrs.dtype for c in casts] == [dtype, "float32", dtype, "float32"]
    assert mod.main.body.checked_type.dtype == "float32"
    # constants were converted, not cast
    assert all(isinstance(a, g.Constant) and a.checked_type.dtype == dtype for a in by_op["nn.conv2d"].args[1:])


@pytest.mark.parametrize("dtype, rtol", [("float16", 2e-2), ("bfloat16", 8e-2)])
def test_converted_block_matches_float32_through_the_interpreter(dtype, rtol):
    mod = _block()
    x = np.random.default_rng(2).standard_normal((1, 8, 8, 8)).astype(np.float32)
    reference = g.evaluate(mod, {"x": x})
    out = g.evaluate(to_mixed_precision(mod, dtype), {"x": x})
    np.testing.assert_allclose(out, reference, rtol=rtol, atol=rtol * np.abs(reference).max())


def test_adjacent_casts_fold_between_two_low_regions():
    """conv (low) -> reshape (follow) -> never-op absent: no f32 round trip between two low ops."""
    x = g.var("x", (1, 4, 6, 6))
    w = g.const(np.ones((4, 4, 1, 1), np.float32))
    y = g.nn.conv2d(g.nn.relu(g.nn.conv2d(x, w)), w)
    mod = to_mixed_precision(g.Module.from_expr(y), "float16")
    assert _ops(mod) == ["cast", "nn.conv2d", "nn.relu", "nn.conv2d", "cast"]
    # the user's own rounding cast survives; its lossless widening back to float32 is dropped
    # because the second conv wants float16 anyway
    z = g.nn.conv2d(g.cast(g.cast(g.nn.conv2d(x, w), "float16"), "float32"), w)
    mod = to_mixed_precision(g.Module.from_expr(z), "float16")
    assert _ops(mod) == ["cast", "nn.conv2d", "cast", "cast", "nn.conv2d", "cast"]


def test_policy_refinement_through_the_pass_context():
    mod = _block()
    with PassContext(config={"to_mixed_precision": {"dtype": "float16", "never": ["nn.dense"]}}):
        lib = tk.compile(mod, "cpu_llvm")
    dtypes = {n.op.name: n.checked_type.dtype for n in post_order(lib.graph.main.body, into_functions=True)
              if isinstance(n, Call) and isinstance(n.op, g.Op)}
    assert dtypes["nn.conv2d"] == "float16" and dtypes["nn.dense"] == "float32"
    x = np.random.default_rng(3).standard_normal((1, 8, 8, 8)).astype(np.float32)
    reference = g.evaluate(mod, {"x": x})
    np.testing.assert_allclose(lib.run([x])[0], reference, rtol=2e-2, atol=2e-2 * np.abs(reference).max())
    assert DEFAULT_POLICY.refined(never=["nn.conv2d"]).category("nn.conv2d") == "never"


def test_bad_dtype_and_config_are_refused_with_a_reason():
    _, _, mod = _seed_network()
    with pytest.raises(TensorkilnError, match="low-precision float"):
        to_mixed_precision(mod, "int8")
    with pytest.raises(TensorkilnError, match="unknown config keys"):
        with PassContext(config={"to_mixed_precision": {"dtype": "float16", "alwais": ["add"]}}):
            tk.compile(mod, "cpu_llvm")
