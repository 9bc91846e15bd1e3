"""Compile an ONNX model whose shapes or static parameters are only known at run time.

`tk.compile(onnx_model, ...)` comes here first (compiler/__init__.py wraps driver.compile):

- every input shape static and every parameter foldable at import: the plain CompiledModel, as before;
- a symbolic dimension (declared by the model or given as `shape={"x": "?x3x224x224"}`), or a
  parameter (axes, pads, scales, a shape, repeats, ...) computed from graph inputs: a
  runtime.specialize.SpecializedModel, which imports and compiles the model per input shape
  (and per value of the inputs such parameters depend on) on first sight, and caches it.

A model with a sequence or optional input or output (a list of arrays, or None) is specialised on
the structure of those values too (_StructuredBuilder, frontend/onnx/structured.py).

Nothing is compiled for a dynamic model until it runs (`lib.specialize(inputs)` warms the cache),
but the model is imported once at a probe shape here, so an unsupported op or dtype is reported
by `tk.compile` itself.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..graph.types import Dim, SymbolicTensorType
from ..ir.errors import DTypeError, TensorkilnError, UnsupportedOpError
from ..runtime.specialize import SpecializedModel, Specialization, StructuredModel

__all__ = ["specializing", "compile_onnx", "is_onnx_model"]


def is_onnx_model(model: Any) -> bool:
    return isinstance(model, (str, Path, bytes, bytearray)) or type(model).__name__ == "ModelProto"


def specializing(compile_static: Callable) -> Callable:
    """Wrap the static compile driver so ONNX models with run-time shapes or parameters compile dynamically."""
    @functools.wraps(compile_static)
    def compile(model: Any, target: Any = "cpu_llvm", *, shape: dict | None = None, memory_limit: int | None = None,
                **options: Any):
        if not is_onnx_model(model):
            return compile_static(model, target, shape=shape, memory_limit=memory_limit, **options)

        def compile_module(mod):
            return compile_static(mod, target, memory_limit=memory_limit, **options)
        return compile_onnx(model, shape, compile_module, memory_limit=memory_limit, target=str(target))
    return compile


def compile_onnx(model_or_path: Any, shape: dict | None, compile_module: Callable, *,
                 memory_limit: int | None = None, target: str = ""):
    """A CompiledModel when the model is static, else a SpecializedModel (see the module docstring)."""
    from ..frontend.onnx import (ValueNotStaticError, from_onnx, input_signature, is_static_signature, load_model,
                                 output_signature)

    model = load_model(model_or_path)
    # A path goes to from_onnx as a path: the checker reads a model over 2 GB from its file.
    source = model_or_path if isinstance(model_or_path, (str, Path)) else model
    signature = input_signature(model, shape)
    if _has_structured_values(model, signature):
        _probe_structured(model, signature, memory_limit)
        return SpecializedModel(signature, _StructuredBuilder(model, compile_module, memory_limit), target=target,
                                output_signature=output_signature(model))
    if is_static_signature(signature):
        static_shape = {name: t.shape for name, t in signature.items()} if shape else None
        try:
            mod = from_onnx(source, shape=static_shape, memory_limit=memory_limit)
        except ValueNotStaticError as error:
            if not error.inputs:  # computed from no graph input: knowing the inputs would not help
                raise
            value_inputs = error.inputs
        else:
            return compile_module(mod)
    else:
        value_inputs = _probe(source, signature, memory_limit)
    builder = _Builder(source, compile_module, memory_limit)
    return SpecializedModel(signature, builder, value_inputs=value_inputs, target=target,
                            output_signature=output_signature(model))


def _probe(source, signature: dict[str, SymbolicTensorType], memory_limit: int | None) -> tuple[str, ...]:
    """Import at a small shape inside the bounds: an unsupported op or dtype raises now, not on the
    first run; a parameter computed from inputs names the inputs to specialise on. Other errors at the
    probe shape (a reshape that only fits other sizes) are left for the real shapes to raise."""
    from ..frontend.onnx import ValueNotStaticError, from_onnx
    if any(t.shape is None for t in signature.values()):
        return ()
    # at least 1 where the bounds allow it: an empty tensor is a valid input but a poor probe
    shapes = {name: tuple(_probe_size(d) if isinstance(d, Dim) else d for d in t.shape) for name, t in signature.items()}
    try:
        from_onnx(source, shape=shapes, memory_limit=memory_limit)
    except ValueNotStaticError as error:
        if not error.inputs:
            raise
        return error.inputs
    except (UnsupportedOpError, DTypeError):
        raise
    except TensorkilnError:
        pass
    return ()


def _probe_size(dim: Dim) -> int:
    return max(dim.lower, 1) if dim.upper is None or dim.upper >= 1 else dim.lower


class _Builder:
    """Imports and compiles the model for concrete input shapes, binding the value inputs as constants;
    a parameter that turns out to depend on more inputs binds those too and imports again."""

    def __init__(self, source, compile_module: Callable, memory_limit: int | None) -> None:
        self.source = source
        self.compile_module = compile_module
        self.memory_limit = memory_limit

    def __call__(self, arrays: dict[str, np.ndarray], value_inputs: tuple[str, ...]) -> Specialization:
        from ..frontend.onnx import ValueNotStaticError, from_onnx
        bound = list(value_inputs)
        while True:
            constants = {name: arrays[name] for name in bound}
            shapes = {name: a.shape for name, a in arrays.items() if name not in constants}
            try:
                mod = from_onnx(self.source, shape=shapes, constants=constants, memory_limit=self.memory_limit)
            except ValueNotStaticError as error:
                new = [name for name in error.inputs if name in arrays and name not in bound]
                if not new:
                    raise
                bound.extend(new)
                continue
            return Specialization(self.compile_module(mod), tuple(bound))


def _has_structured_values(model, signature) -> bool:
    from ..frontend.onnx.structured import declares_structured_outputs
    from ..graph.sequence_types import is_structured_type
    return any(is_structured_type(t) for t in signature.values()) or declares_structured_outputs(model)


def _probe_structured(model, signature, memory_limit: int | None) -> None:
    """Import once with each sequence of one element and each optional present (elements at the probe
    shape), so an unsupported op or dtype is an error of tk.compile; skipped when an element's rank is
    unknown. Errors of the probe structure itself (a position past its one element) are left to the run."""
    from ..frontend.onnx import ValueNotStaticError, from_onnx
    from ..frontend.onnx.converters.sequence import SequenceOutputError
    from ..frontend.onnx.structured import flatten_inputs, value_leaves
    from ..graph.sequence_types import SymbolicSequenceType, is_structured_type
    from ..ir.dtypes import to_numpy
    values = {}
    for name, ttype in signature.items():
        element = ttype.element if is_structured_type(ttype) else ttype
        is_sequence = isinstance(element, SymbolicSequenceType)
        element = element.element if is_sequence else element
        if element.shape is None:
            return
        array = np.zeros(tuple(_probe_size(d) if isinstance(d, Dim) else d for d in element.shape),
                         to_numpy(element.dtype))
        values[name] = [array] if is_sequence else array
    flat_model, leaves = flatten_inputs(model, values)
    shapes = {leaf: array.shape for name, value in values.items()
              for leaf, array in zip(leaves[name], value_leaves(value))}
    try:
        from_onnx(flat_model, shape=shapes, memory_limit=memory_limit)
    except (ValueNotStaticError, SequenceOutputError):   # specialised on, and rebuilt, at run time
        pass
    except (UnsupportedOpError, DTypeError):
        raise
    except TensorkilnError:
        pass


class _StructuredBuilder:
    """Builds for a model with sequence or optional inputs or outputs: the model is rewritten for the
    structure of this call's values (each sequence's length, each optional's presence) into one over
    tensors, which _Builder imports and compiles; sequence outputs found at import are exposed element
    by element (the importer's SequenceOutputError names their lengths) and rebuilt as lists."""

    def __init__(self, model, compile_module: Callable, memory_limit: int | None) -> None:
        self.model = model
        self.compile_module = compile_module
        self.memory_limit = memory_limit

    def __call__(self, values: dict[str, Any], value_inputs: tuple[str, ...]) -> Specialization:
        from ..frontend.onnx.converters.sequence import SequenceOutputError
        from ..frontend.onnx.structured import expose_outputs, flatten_inputs, value_leaves
        model, leaves = flatten_inputs(self.model, values)
        arrays = {leaf: array for name, value in values.items()
                  for leaf, array in zip(leaves[name], value_leaves(value))}
        bound = tuple(leaf for name in value_inputs for leaf in leaves[name])
        layout = None
        try:
            built = _Builder(model, self.compile_module, self.memory_limit)(arrays, bound)
        except SequenceOutputError as error:
            model, layout = expose_outputs(model, error.structure)
            if layout.num_flat == 0:   # every output an empty optional: nothing to compile
                return Specialization(StructuredModel(None, leaves, layout), value_inputs)
            built = _Builder(model, self.compile_module, self.memory_limit)(arrays, bound)
        # a value input found among the tensors of a sequence specialises on the whole sequence
        owners = {name for name in values if set(leaves[name]) & set(built.value_inputs)}
        return Specialization(StructuredModel(built.compiled, leaves, layout),
                              tuple(name for name in values if name in owners or name in value_inputs))
