"""Target resolution: names, aliases, options, unknown targets, unavailable targets."""
import pytest

import tensorkiln as tk
from tensorkiln.ir.errors import TargetError


@pytest.mark.parametrize("text, name", [("llvm", "cpu_llvm"), ("cpu", "cpu_llvm"), ("cpu_llvm", "cpu_llvm"),
                                        ("hls", "fpga_hls"), ("opencl", "opencl"), ("cuda", "cuda")])
def test_aliases_resolve(text, name):
    assert tk.target(text).name == name


def test_options_are_validated_and_defaulted():
    target = tk.target("llvm -mcpu=native -num_threads=2")
    assert target.options["mcpu"] == "native"
    assert target.options["num_threads"] == 2
    assert target.options["opt_level"] == 3
    assert str(target) == "cpu_llvm -mcpu=native -num_threads=2 -opt_level=3 -winograd=auto"
    assert tk.target(str(target)) == target


def test_unknown_option_lists_accepted_ones():
    with pytest.raises(TargetError, match=r"target 'cpu_llvm' has no option -mgpu; accepted options: -mcpu, -mattr"):
        tk.target("llvm -mgpu=sm_80")


def test_option_of_wrong_type():
    with pytest.raises(TargetError, match=r"-num_threads='many' must be of type int"):
        tk.target("llvm -num_threads=many")


def test_option_outside_choices():
    with pytest.raises(TargetError, match=r"-opt_level=.*must be one of 0, 1, 2, 3"):
        tk.target("llvm -opt_level=7")


def test_unknown_target_lists_installed_targets():
    with pytest.raises(TargetError) as info:
        tk.target("tpu")
    message = str(info.value)
    assert "unknown target 'tpu'" in message
    for name in ("cpu_llvm", "opencl", "cuda", "fpga_hls"):
        assert name in message


def test_empty_and_malformed_target_strings():
    with pytest.raises(TargetError, match="empty target string"):
        tk.target("  ")
    with pytest.raises(TargetError, match="must start with '-'"):
        tk.target("llvm mcpu=native")


def _unavailable_target():
    """A target whose manifest says available = false (every in-tree target has a code generator now)."""
    from tensorkiln.sdk import Target, TargetSpec
    from tensorkiln.sdk.manifest import PluginManifest
    manifest = PluginManifest.model_validate({"plugin": {
        "name": "future_npu", "version": "0.1.0", "sdk_api": ">=1.0,<2", "device_kind": "accelerator",
        "available": False, "unavailable_reason": "the emitter is not implemented yet (planned)"}})
    return Target(TargetSpec(manifest=manifest), {})


def test_target_without_code_generator_says_not_available():
    spec = _unavailable_target().spec
    assert not spec.is_available
    with pytest.raises(TargetError, match=r"target 'future_npu' is not available yet: .*not implemented yet"):
        spec.require_available()


def test_compiling_for_an_unavailable_target_is_refused():
    from tensorkiln import graph, te

    target = _unavailable_target()
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    with pytest.raises(TargetError, match="is not available yet"):
        tk.build(te.create_schedule(B.op), [A, B], target=target)
    x = graph.var("x", shape=(4,))
    with pytest.raises(TargetError, match="is not available yet"):
        tk.compile(graph.Module.from_expr(graph.nn.relu(x)), target=target)
