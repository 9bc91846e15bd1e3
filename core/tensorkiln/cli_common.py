"""cli_common.py: helpers shared by the `tensorkiln` command's modules.

`tensorkiln.cli` and the subcommands other packages add to it (conformance/cli.py)
both parse arguments with these, so neither imports the other's private helpers.
"""
from __future__ import annotations

__all__ = ["parse_shapes"]


def parse_shapes(items: list[str] | None) -> dict | None:
    """["input=1,3,224,224"] -> {"input": (1, 3, 224, 224)}: the values of repeated --shape options."""
    if not items:
        return None
    shapes = {}
    for item in items:
        name, _, dims = item.partition("=")
        if not dims:
            raise SystemExit(f"error: --shape {item!r} must look like NAME=1,3,224,224")
        shapes[name] = tuple(int(d) for d in dims.split(","))
    return shapes
