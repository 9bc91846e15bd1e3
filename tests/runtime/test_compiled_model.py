"""tests/runtime/test_compiled_model.py: CompiledModel.loaded_module takes a target as users write it."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.ir.errors import TargetError
from tensorkiln.runtime import CompiledModel


@pytest.fixture(scope="module")
def lib():
    x = tk.graph.var("x", shape=(4,))
    return tk.compile(tk.graph.nn.relu(tk.graph.add(x, x)), target="llvm")


def test_loaded_module_accepts_the_name_an_alias_the_full_string_or_a_target(lib):
    (full,) = lib.artifacts
    module = lib.loaded_module(full)
    for spelling in ("cpu_llvm", "llvm", tk.target("llvm"), full):
        assert lib.loaded_module(spelling) is module
    (kernel,) = [k.name for k in module.artifact.kernels]
    out = np.zeros(4, "float32")
    module.get_function(kernel)(np.array([-1, 0, 1, 2], "float32"), out)
    np.testing.assert_array_equal(out, [0, 0, 2, 4])


def test_loaded_module_of_a_target_the_model_does_not_use_lists_the_targets_it_uses(lib):
    (full,) = lib.artifacts
    with pytest.raises(TargetError, match=rf"loaded_module\('acme_dsp'\): the model has no kernels for that "
                                          rf"target; it uses '{full}'"):
        lib.loaded_module("acme_dsp")
    with pytest.raises(TargetError, match=r"it uses 'cpu_llvm "):
        lib.loaded_module("cpu_llvm -opt_level=1")     # same plugin, other options: not what was compiled


def test_a_bare_name_that_fits_several_targets_asks_for_the_full_string():
    targets = {str(t): t for t in (tk.target("llvm -opt_level=1"), tk.target("llvm -opt_level=2"))}
    model = CompiledModel(plan=None, constants={}, artifacts=dict.fromkeys(targets), target_objects=targets,
                          target=next(iter(targets)))
    with pytest.raises(TargetError, match=r"the model uses several llvm targets \('cpu_llvm .*opt_level=1.*', "
                                          r"'cpu_llvm .*opt_level=2.*'\); pass the full target string"):
        model.loaded_module("llvm")


def test_loaded_module_has_a_docstring():
    assert "name or alias" in CompiledModel.loaded_module.__doc__


def test_run_takes_arrays_in_input_order_too():
    import numpy as np
    import tensorkiln as tk
    from tensorkiln import graph
    x = graph.var("x", shape=(3,))
    lib = tk.compile(graph.Module.from_expr(graph.nn.relu(x)), target="cpu_llvm")
    data = np.array([-1, 0, 2], "float32")
    np.testing.assert_array_equal(lib.run(data)[0], np.maximum(data, 0))          # was a raw ValueError
    np.testing.assert_array_equal(lib.run([data])[0], np.maximum(data, 0))
    import pytest
    from tensorkiln.ir.errors import RuntimeLaunchError
    with pytest.raises(RuntimeLaunchError, match="not both"):
        lib.run([data], x=data)
