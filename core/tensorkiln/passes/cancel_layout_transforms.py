"""passes/cancel_layout_transforms.py: remove layout transforms that undo each other.

    %0 = layout_transform(%x, src_layout="NCHW", dst_layout="NHWC")
    %1 = layout_transform(%0, src_layout="NHWC", dst_layout="NCHW")    ->    %x
    nn.relu(%1)                                                               nn.relu(%x)

Back-to-back transforms A -> B -> C become one A -> C (nothing when C is A);
a transform to its own layout disappears. Run after alter_layout.
"""
from __future__ import annotations

from ..graph import Call, Expr, Module, get_op, rewrite
from .manager import register_pass

__all__ = ["cancel_layout_transforms"]


@register_pass("cancel_layout_transforms", opt_level=1)
def cancel_layout_transforms(mod: Module) -> Module:
    """Merge chains of layout_transform and drop the ones that end where they started."""
    op = get_op("layout_transform")

    def cancel(node: Expr) -> Expr | None:
        if not (isinstance(node, Call) and node.op is op):
            return None
        source, src_layout = node.args[0], node.attrs.src_layout
        if isinstance(source, Call) and source.op is op and source.attrs.dst_layout == src_layout:
            source, src_layout = source.args[0], source.attrs.src_layout
        if src_layout == node.attrs.dst_layout:
            return source
        if source is node.args[0]:
            return None
        return Call(op, (source,), op.make_attrs(src_layout=src_layout, dst_layout=node.attrs.dst_layout), node.span)

    return rewrite(mod, cancel)
