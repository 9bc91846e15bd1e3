"""An `onnx.backend.base.Backend` for tensorkiln, so onnx's backend test machinery runs on any target.

The module itself is the backend for cpu_llvm (`onnx.backend.test.BackendTest(tensorkiln.onnx_backend)`);
`backend_for("opencl")` returns one for another target, and `tensorkiln.onnx_backend.opencl`
(one attribute per installed target) selects it by name for harnesses taking `module:attr`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from onnx.backend.base import Backend, BackendRep

__all__ = ["TensorkilnBackend", "TensorkilnBackendRep", "backend_for", "prepare", "run_model", "run_node",
           "supports_device"]


class TensorkilnBackendRep(BackendRep):
    """A compiled ONNX model; `run(inputs)` takes arrays in graph-input order (a list of arrays for a
    sequence input, None for an absent optional) and returns a list for a sequence output, None for an
    empty optional."""

    def __init__(self, compiled, narrow_outputs: dict[int, str] | None = None) -> None:
        self.compiled = compiled
        # float8/int4/... outputs come back from the model as their carrier (ir/narrow_dtypes.py)
        self.narrow_outputs = dict(narrow_outputs or {})

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        from .ir.narrow_dtypes import from_carrier, to_carrier

        if isinstance(inputs, dict):
            outputs = self.compiled.run({name: _carried(array, to_carrier) for name, array in inputs.items()})
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            names = self.compiled.input_names
            outputs = self.compiled.run({name: _carried(array, to_carrier) for name, array in zip(names, arrays)})
        return tuple(from_carrier(out, self.narrow_outputs[i]) if i in self.narrow_outputs else out
                     for i, out in enumerate(outputs))


def _carried(value: Any, to_carrier) -> Any:
    """An input as the model takes it: a sequence (a list) element by element, an empty optional (None)
    as it is (runtime/specialize.py specialises on both), a tensor through `to_carrier`."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [to_carrier(item) for item in value]
    return to_carrier(value)


class TensorkilnBackend(Backend):
    """Compiles ONNX models with tensorkiln for `target` (cpu_llvm unless a subclass says otherwise)."""

    target = "cpu_llvm"

    @classmethod
    def is_compatible(cls, model, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs: Any) -> TensorkilnBackendRep:
        """Compile `model`. Optional kwargs: shape= and constants= (as for from_onnx), target=, opt_level=.

        Without constants= the model goes to `tk.compile` as it is: symbolic dimensions, and
        parameters (axes, pads, shapes) computed from graph inputs, are specialised at run time.
        """
        import tensorkiln as tk
        from .frontend.onnx.narrow_types import boundary_formats

        super().prepare(model, device, **kwargs)
        target, opt_level = kwargs.get("target", cls.target), kwargs.get("opt_level")
        narrow_outputs = boundary_formats(model)[1] if hasattr(model, "graph") else {}
        if kwargs.get("constants"):
            model = tk.frontend.from_onnx(model, shape=kwargs.get("shape"), constants=kwargs["constants"])
        compiled = tk.compile(model, target=target, opt_level=opt_level, shape=kwargs.get("shape"))
        return TensorkilnBackendRep(compiled, narrow_outputs)

    @classmethod
    def run_model(cls, model, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs: Sequence[Any], device: str = "CPU", outputs_info=None, **kwargs: Any):
        import onnx
        from onnx import helper

        arrays = [np.asarray(a) for a in inputs]
        graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                        for name, a in zip(node.input, arrays) if name]
        graph_outputs = [helper.make_empty_tensor_value_info(name) for name in node.output if name]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(node.domain or "", kwargs.get("opset", onnx.defs.onnx_opset_version()))])
        # The checker in prepare() wants typed graph outputs: let ONNX shape inference fill them in.
        model = onnx.shape_inference.infer_shapes(model)
        return cls.run_model(model, [a for name, a in zip(node.input, arrays) if name], device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return str(device).upper() in ("CPU", "")


def backend_for(target: str) -> type[TensorkilnBackend]:
    """A Backend class compiling for `target` (name, alias or full target string)."""
    import tensorkiln as tk

    resolved = str(tk.target(target))
    return type(f"TensorkilnBackend_{tk.target(target).name}", (TensorkilnBackend,), {"target": resolved})


prepare = TensorkilnBackend.prepare
run_model = TensorkilnBackend.run_model
run_node = TensorkilnBackend.run_node
supports_device = TensorkilnBackend.supports_device
is_compatible = TensorkilnBackend.is_compatible


def __getattr__(name: str):
    import tensorkiln as tk

    if name in tk.targets():
        return backend_for(name)
    raise AttributeError(f"module 'tensorkiln.onnx_backend' has no attribute {name!r}; "
                         f"installed targets: {', '.join(tk.targets())}")
