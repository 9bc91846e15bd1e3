"""PassManager and PassContext: skips recorded with reasons, instruments, verification."""
import io

import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import Module
from tensorkiln.graph.verify import verify_module
from tensorkiln.ir.errors import InternalError
from tensorkiln.passes import (GRAPH_PIPELINE, Pass, PassContext, PassManager, PassTimingInstrument,
                               PrintIRInstrument, registered_passes)


def _module():
    x = graph.var("x", shape=(4,))
    return Module.from_expr(x + (graph.const([1.0, 2, 3, 4]) + graph.const(1.0)))


def test_every_pipeline_pass_is_registered_with_an_opt_level():
    passes = registered_passes()
    assert all(name in passes for name in GRAPH_PIPELINE)
    assert passes["alter_layout"].opt_level == 2   # layout preferences apply at the default opt level
    assert all(passes[name].opt_level == 1 for name in GRAPH_PIPELINE if name != "alter_layout")


def test_disabled_pass_is_recorded_as_skipped_with_its_reason():
    manager = PassManager(PassContext(opt_level=3, disabled={"fold_constants"}, verify=True))
    mod = _module()
    assert manager.run(mod, ("fold_constants",)) is mod
    assert [(s.name, s.reason) for s in manager.skipped] == [("fold_constants", "disabled by PassContext")]


def test_opt_level_gates_passes():
    manager = PassManager(PassContext(opt_level=0))
    mod = manager.run(_module(), GRAPH_PIPELINE)
    assert manager.ran == []
    assert {s.reason for s in manager.skipped} == {"opt level 1 > 0", "opt level 2 > 0"}
    manager = PassManager(PassContext(opt_level=1, verify=True))
    manager.run(_module(), GRAPH_PIPELINE)
    assert "fold_constants" in manager.ran and [s.name for s in manager.skipped] == ["alter_layout"]


def test_unknown_pass_names_in_the_context_are_refused():
    with pytest.raises(Exception, match="unknown passes"):
        PassContext(disabled={"fold_constant"})


def test_print_ir_instrument_prints_after_the_named_pass():
    stream = io.StringIO()
    context = PassContext(opt_level=1, instruments=[PrintIRInstrument(after=["fold_constants"], stream=stream)])
    PassManager(context).run(_module(), ("simplify_inference", "fold_constants"))
    text = stream.getvalue()
    assert text.startswith("# IR after fold_constants\n")
    assert "const([2., 3., 4., 5.], float32)" in text and "simplify_inference" not in text


def test_timing_instrument_records_each_pass():
    timing = PassTimingInstrument()
    PassManager(PassContext(opt_level=1, instruments=[timing])).run(_module(), ("fold_constants",))
    assert set(timing.times) == {"fold_constants"} and "total" in timing.render()


def _ill_typed_pass(mod):
    """Claims relu's result is int32: what a buggy pass that patches types by hand produces."""
    body = mod.main.body
    broken = graph.nn.relu(body)
    object.__setattr__(broken, "checked_type", graph.TensorType(body.shape, "int32"))
    return mod.with_function("main", graph.Function(mod.main.params, broken))


def _unbound_variable_pass(mod):
    stray = graph.var("stray", shape=(4,))
    function = mod.main
    return mod.with_function("main", graph.Function(function.params, function.body + stray))


@pytest.mark.parametrize("function, message", [(_ill_typed_pass, r"nn.relu.* has type int32\(4\)"),
                                               (_unbound_variable_pass, "unbound variables \\['stray'\\]")])
def test_verify_instrument_catches_an_ill_formed_pass(function, message):
    bad = Pass("bad_pass", function, opt_level=0)
    with pytest.raises(InternalError, match=message):
        PassManager(PassContext(verify=True)).run(_module(), (bad,))
    PassManager(PassContext(verify=False)).run(_module(), (bad,))  # unverified, it goes through


def test_verify_module_accepts_the_output_of_every_pipeline_pass():
    verify_module(PassManager(PassContext(opt_level=3)).run(_module(), GRAPH_PIPELINE))
    with pytest.raises(InternalError, match="stray"):
        verify_module(_unbound_variable_pass(_module()))
    assert np.allclose(graph.evaluate(_module(), {"x": np.zeros(4, "float32")}), [2, 3, 4, 5])
