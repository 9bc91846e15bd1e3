"""cli_common.py: helpers shared by the `tensorkiln` command's modules.

`tensorkiln.cli` and the subcommands other packages add to it (conformance/cli.py)
both parse arguments with these, so neither imports the other's private helpers.
"""
from __future__ import annotations

__all__ = ["parse_shapes"]


def parse_shapes(items: list[str] | None) -> dict | None:
    """The values of repeated --shape options: ["input=1,3,224,224"] -> {"input": (1, 3, 224, 224)}.

    A shape with symbolic dimensions ("input=?x3x224x224", "ids=1xseq:1..512") stays a string, which
    tk.compile reads (graph.types.parse_shape) so that "?" keeps the model's name for that dimension.
    """
    from .graph.types import parse_shape
    from .ir.errors import ShapeError

    if not items:
        return None
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        if not dims:
            raise SystemExit(f"error: --shape {item!r} must look like NAME=1,3,224,224")
        try:
            parsed = parse_shape(dims)
        except ShapeError as error:
            raise SystemExit(f"error: --shape {item!r}: {error}") from None
        shapes[name] = parsed if all(isinstance(d, int) for d in parsed) else dims
    return shapes
