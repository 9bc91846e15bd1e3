"""`tensorkiln compile` of a model with symbolic dimensions (`--shape input=?x3x224x224`).

Such a model compiles per input shape at run time (runtime/specialize.py), and a package holds one
static plan, so the command checks the model, compiles the shapes given with `--specialize NAME=dims`
(default: every symbol at its lower bound, and at its upper bound when it has one) and writes one
package per shape, MODEL.<shapes>.tkpkg. A model whose parameters depend on input values (axes,
pads, a shape from an input) cannot be packaged this way: it runs through tk.compile in Python.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .graph.sequence_types import is_structured_type
from .graph.types import Dim
from .ir.dtypes import to_numpy

__all__ = ["export_specializations"]


def export_specializations(lib, model_path: str, output: str | None, specialize: list[str] | None, console) -> int:
    console.print("dynamic model: " + ", ".join(f"{name}: {t}" for name, t in lib.signature.items()))
    if any(is_structured_type(t) for t in lib.signature.values()):
        raise SystemExit("error: this model takes a sequence or an optional, which a package cannot hold (it "
                         "compiles per sequence length at run time); run it with tensorkiln.compile(model) in Python")
    if lib.value_inputs:
        raise SystemExit(f"error: parameters of this model are computed from the values of inputs "
                         f"{list(lib.value_inputs)}; it has no ahead-of-time package. Run it with "
                         "tensorkiln.compile(model) in Python, which specialises at run time, or bind those inputs")
    stem = Path(output).with_suffix("") if output else Path(model_path).with_suffix("")
    for shapes in _requested_shapes(lib, specialize):
        inputs = {name: np.zeros(shape, to_numpy(lib.signature[name].dtype)) for name, shape in shapes.items()}
        compiled = lib.specialize(inputs)
        label = "_".join("x".join(map(str, shape)) for shape in shapes.values())
        path = f"{stem}.{label}.tkpkg"
        compiled.export(path)
        console.print(f"wrote {path} ({', '.join(f'{n}={s}' for n, s in shapes.items())}; "
                      f"compile {compiled.compile_seconds:.2f} s)")
    return 0


def _requested_shapes(lib, specialize: list[str] | None) -> list[dict[str, tuple[int, ...]]]:
    from .cli_common import parse_shapes

    if specialize:
        given = parse_shapes(specialize)
        dynamic = [name for name, value in given.items() if isinstance(value, str)]
        if dynamic:
            raise SystemExit(f"error: --specialize needs concrete sizes; {dynamic} have symbols")
        return [{name: given.get(name, _at(t, {})) for name, t in lib.signature.items()}]
    symbols = {d.name: d for t in lib.signature.values() for d in t.symbols}
    if any(t.shape is None for t in lib.signature.values()):
        raise SystemExit("error: an input has no declared rank; give its shape with --specialize NAME=dims")
    lows = {name: d.lower for name, d in symbols.items()}
    highs = {name: d.upper if d.upper is not None else d.lower for name, d in symbols.items()}
    picks = [lows] if lows == highs else [lows, highs]
    return [{name: _at(t, pick) for name, t in lib.signature.items()} for pick in picks]


def _at(ttype, values: dict[str, int]) -> tuple[int, ...]:
    return tuple(values.get(d.name, d.lower) if isinstance(d, Dim) else d for d in ttype.shape)
