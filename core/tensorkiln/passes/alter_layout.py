"""passes/alter_layout.py: convert conv2d to the data layout the target prefers.

The preference comes from the target's manifest (`[[layouts]]`), then from
every plugin's `tensorkiln_layout_preferences(target)` hook (later ones win),
then from `PassContext(config={"alter_layout": {"nn.conv2d": "NHWC"}})`.
With NHWC preferred:

    %0 = nn.conv2d(%x, W)                 %t = layout_transform(%x, NCHW -> NHWC)
    %1 = nn.bias_add(%0, %b)      ->      %0 = nn.conv2d(%t, W', data_layout=NHWC, kernel_layout=HWIO)
    %2 = nn.relu(%1)                      %1 = nn.bias_add(%0, %b, axis=3)
    %3 = nn.conv2d(%2, W2)                %2 = nn.relu(%1)
    %3                                    %3 = nn.conv2d(%2, W2', data_layout=NHWC, kernel_layout=HWIO)
                                          layout_transform(%3, NHWC -> NCHW)

A converted tensor stays in the new layout through layout-agnostic ops
(elementwise and broadcast ops, whose constant operands are permuted at
compile time; bias_add, concatenate and lrn, whose axis is remapped; image.resize, whose per-axis
sizes, scales and roi are permuted) and through
max/avg pools (which take a `layout` attribute), so layout_transform appears
only at the boundaries of the converted region: where an op that knows only
NCHW (reshape, ...) or the function result needs the original layout; a global pool of a
converted tensor becomes a mean (max) over its H and W axes, keepdims, in the new layout. Constant weights are permuted here; a transform of
a computed weight is left to fold_constants.

Supported: NCHW <-> NHWC data layouts (weights HWIO or OHWI), and blocked NCHW{x}c (x a
power of two, weights OIHW{x}i{x}o: TVM's conv2d_NCHWc). In a blocked region only convs of
one group whose output channels divide by x convert (the others stay NCHW, with transforms at
their edges); one whose input channels do not divide (a first conv on 3 channels) reads NCHW
data and writes blocked output (out_layout, weights OIHW{C}i{x}o), as TVM's first layer does;
a bias_add with a constant bias becomes an add of the bias blocked as (C/x, 1, 1, x), as
broadcast constants of shape (C, 1, 1) do; pools take the blocked layout; a concatenate along C stays blocked (along the outer C axis) when each
input's channels divide by x; lrn and resize stay NCHW. `check_preference` says whether a
preference is honoured, and the conformance kit reports one that is not.

Conversion pays only where the convs' work dwarfs the transforms they need: a
graph in which layout-sensitive ops (reshape / transpose channel shuffles) sit
between most convs, such as shufflenet, gets a transform pair around nearly every
small conv. The pass keeps the original graph when the converted convs do fewer than
MIN_MACS_PER_MOVED_ELEMENT multiply-adds per element the data transforms move
(light models: shufflenet 37, slower converted; squeezenet 174 and the others
over 300, faster converted).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import Call, Constant, Expr, Function, Module, Tuple, TupleGetItem, get_op, post_order
from ..graph.ops.layout import primal_sizes, transform_layout
from ..graph.ops.nn import DATA_LAYOUTS, KERNEL_LAYOUTS, POOL_LAYOUTS, blocked_kernel_layout, data_layout_block
from ..graph.registry import Op, OpPattern
from ..graph.types import TensorType
from .manager import register_pass

__all__ = ["alter_layout", "layout_preferences", "check_preference", "honoured_layouts", "DEFAULT_KERNEL_LAYOUTS"]

# The weight layout that goes with a data layout when the preference does not name one.
DEFAULT_KERNEL_LAYOUTS = {"NCHW": "OIHW", "NHWC": "HWIO"}
_ORIGINAL = "NCHW"
_BLOCKED_DATA, _BLOCKED_WEIGHT = "NCHW{x}c", "OIHW{x}i{x}o"   # x: a power of two


def _default_kernel_layout(layout: str) -> str | None:
    block = data_layout_block(layout)
    return blocked_kernel_layout(block) if block else DEFAULT_KERNEL_LAYOUTS.get(layout)


def layout_preferences(target, config: dict | None = None) -> dict[str, tuple[str, str | None]]:
    """{op name: (data layout, weight layout or None)}: manifest, then plugin hooks, then config."""
    found: dict[str, tuple[str, str | None]] = {}
    if target is not None:
        from ..sdk.plugin_manager import registry
        hooked = registry().call("tensorkiln_layout_preferences", target)
        for preference in (*target.manifest.layouts, *hooked):
            found[preference.op] = (preference.layout, preference.weight_layout)
    for op_name, layout in (config or {}).items():
        found[op_name] = (layout, None) if isinstance(layout, str) else tuple(layout)
    return found


def honoured_layouts() -> dict[str, dict[str, tuple[str, ...]]]:
    """{op name: {"data": data layouts, "weight": weight layouts}} that alter_layout can convert to.

    Only nn.conv2d is converted, to the layouts its attributes accept ("{x}": any power of two):
    `{"nn.conv2d": {"data": ("NCHW", "NHWC", "NCHW{x}c"), "weight": ("OIHW", "HWIO", "OHWI", "OIHW{x}i{x}o")}}`.
    """
    # other blocked weight layouts ("OHWI16o") are a target's packing of constant weights after this pass
    return {"nn.conv2d": {"data": (*DATA_LAYOUTS, _BLOCKED_DATA), "weight": (*KERNEL_LAYOUTS, _BLOCKED_WEIGHT)}}


def check_preference(op: str, layout: str, weight_layout: str | None = None) -> str:
    """"" when alter_layout honours the preference `layout` (and `weight_layout`) for `op`, else why not.

    The conformance kit calls it for every preference a target states, since the pass
    itself leaves an unhonoured preference unapplied without a word:

        check_preference("nn.conv2d", "NHWC")    -> ""
        check_preference("nn.conv2d", "NCHW16c") -> ""          (weights OIHW16i16o)
        check_preference("nn.conv2d", "NCHW6c")  -> "alter_layout cannot convert nn.conv2d to data layout ..."
    """
    honoured = honoured_layouts()
    if op not in honoured:
        return (f"alter_layout converts only {', '.join(sorted(honoured))}; a layout preference for {op} "
                f"({layout}) is never applied")
    data_layouts, weight_layouts = honoured[op]["data"], honoured[op]["weight"]
    block = data_layout_block(layout)
    if block:
        if weight_layout not in (None, blocked_kernel_layout(block)):
            return (f"alter_layout cannot give {op} ({layout}) the weight layout {weight_layout}: blocked data "
                    f"takes {blocked_kernel_layout(block)} weights")
        return ""
    if layout not in data_layouts:
        return (f"alter_layout cannot convert {op} to data layout {layout}: it converts to "
                f"{', '.join(data_layouts)} only, with x a power of two")
    if layout == _ORIGINAL and weight_layout not in (None, DEFAULT_KERNEL_LAYOUTS[_ORIGINAL]):
        return (f"alter_layout leaves {_ORIGINAL} {op} as it is: the weight layout {weight_layout} "
                f"is applied only together with a converted data layout "
                f"({', '.join(d for d in data_layouts if d != _ORIGINAL)})")
    weight = weight_layout or _default_kernel_layout(layout)
    if weight not in weight_layouts:
        return (f"alter_layout cannot give {op} ({layout}) the weight layout {weight}: it converts weights "
                f"to {', '.join(weight_layouts)} only")
    return ""


@register_pass("alter_layout", opt_level=2)
def alter_layout(mod: Module, target=None, config: dict | None = None) -> Module:
    """Convert nn.conv2d to the target's preferred layout, transforming data only at region boundaries."""
    data_layout, kernel_layout = layout_preferences(target, config).get("nn.conv2d", (_ORIGINAL, None))
    kernel_layout = kernel_layout or _default_kernel_layout(data_layout)
    # An unhonoured preference is left unapplied here; the conformance kit reports it (check_preference).
    if data_layout == _ORIGINAL or check_preference("nn.conv2d", data_layout, kernel_layout):
        return mod
    main = _convert(mod.main, data_layout, kernel_layout)
    requested = "nn.conv2d" in (config or {})   # asked for by the user: converted whatever it costs
    if main is mod.main or not (requested or _pays_off(main)):
        return mod
    return mod.with_function("main", main)


MIN_MACS_PER_MOVED_ELEMENT = 64


def _pays_off(main: Function) -> bool:
    """True when the converted convs do at least MIN_MACS_PER_MOVED_ELEMENT multiply-adds per element
    moved by the data layout transforms the conversion inserted."""
    macs = moved = 0
    for node in post_order(main.body):
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            continue
        if node.op.name == "nn.conv2d" and (node.attrs.data_layout != _ORIGINAL or node.attrs.out_layout):
            weight = node.args[1].checked_type.shape
            out_channels = primal_sizes(tuple(int(d) for d in weight), node.attrs.kernel_layout)["O"]
            macs += _size(node.checked_type.shape) * _size(weight) // max(1, out_channels)
        elif node.op.name == "layout_transform" and not isinstance(node.args[0], Constant):
            moved += _size(node.checked_type.shape)
    return macs >= MIN_MACS_PER_MOVED_ELEMENT * moved


def _size(shape) -> int:
    return int(np.prod([int(d) for d in shape], dtype=np.int64))


def _convert(function: Function, layout: str, kernel_layout: str) -> Function:
    converter = _Converter(layout, kernel_layout)
    for node in post_order(function):
        if node is function:
            body = converter.original(function.body)
            if body is function.body:
                return function
            return Function(function.params, body, function.attrs)
        converter.visit(node)
    raise AssertionError("unreachable: post_order yields the root last")


class _Converter:
    """Rebuilds nodes bottom-up, tracking which rebuilt tensors are in the new layout."""

    def __init__(self, layout: str, kernel_layout: str) -> None:
        self.layout, self.kernel_layout = layout, kernel_layout
        self.block = data_layout_block(layout)   # 0 unless NCHW{x}c
        self.memo: dict[int, Expr] = {}         # id(original) -> rebuilt, in the original layout
        self.converted: dict[int, Expr] = {}    # id(original) -> rebuilt, in `layout`
        self.produced: set[int] = set()         # ids of originals rebuilt natively in `layout`

    # Each visited node is rebuilt in one layout; `original` / `in_layout` give the
    # other one on demand (a layout_transform, or a permuted constant), cached so
    # that several users share one transform.
    def original(self, node: Expr) -> Expr:
        if id(node) not in self.memo:
            self.memo[id(node)] = _transform(self.converted[id(node)], self.layout, _ORIGINAL)
        return self.memo[id(node)]

    def in_layout(self, node: Expr) -> Expr:
        if id(node) not in self.converted:
            value = self.original(node)
            self.converted[id(node)] = (Constant(transform_layout(value.value, _ORIGINAL, self.layout))
                                        if isinstance(value, Constant) else _transform(value, _ORIGINAL, self.layout))
        return self.converted[id(node)]

    def visit(self, node: Expr) -> None:
        if isinstance(node, Call) and isinstance(node.op, Op):
            rebuilt = self._rebuild_converted(node)
            if rebuilt is not None:
                self.converted[id(node)] = rebuilt
                self.produced.add(id(node))
                return
        self.memo[id(node)] = self._rebuild_original(node)

    def _rebuild_original(self, node: Expr) -> Expr:
        if isinstance(node, Call):
            args = tuple(self.original(a) for a in node.args)
            return node if all(a is b for a, b in zip(args, node.args)) else dataclasses.replace(node, args=args)
        if isinstance(node, Tuple):
            fields = tuple(self.original(f) for f in node.fields)
            return node if all(a is b for a, b in zip(fields, node.fields)) else Tuple(fields)
        if isinstance(node, TupleGetItem):
            value = self.original(node.tuple_value)
            return node if value is node.tuple_value else TupleGetItem(value, node.index)
        return node  # Var, Constant, a nested Function (fused groups are not converted)

    def _rebuild_converted(self, call: Call) -> Expr | None:
        """The call rebuilt in the new layout, or None when it stays in the original layout."""
        name = call.op.name
        if name == "nn.conv2d":
            return self._conv2d(call)
        if not isinstance(call.checked_type, TensorType) or call.ndim != 4:
            return None
        if self.block and int(call.checked_type.shape[1]) % self.block:
            return None   # its channels do not divide the block
        if name in ("nn.max_pool2d", "nn.avg_pool2d"):
            # also when its input is only transformed for other users (a graph input feeding convs
            # and a pool): the pool then shares that transform instead of staying behind
            (data,) = call.args
            if (not (self.layout in POOL_LAYOUTS or self.block) or call.attrs.layout != _ORIGINAL
                    or not (id(data) in self.produced or id(data) in self.converted)):
                return None
            return Call(call.op, (self.in_layout(data),), dataclasses.replace(call.attrs, layout=self.layout),
                        call.span)
        if not any(id(a) in self.produced for a in call.args):
            return None  # nothing around is converted: converting here would only add transforms
        if name in ("nn.global_avg_pool2d", "nn.global_max_pool2d"):
            # a mean (max) over H and W, kept in the new layout: the pooled (1, 1, 1, C) goes back to
            # NCHW for free where it must, where the whole (N, H, W, C) map used to be transformed
            # back to be pooled (squeezenet: 13x13x1000, 64 us of its 100 us head)
            reduce = get_op("mean" if name == "nn.global_avg_pool2d" else "max")
            axes = (self.layout.index("H"), self.layout.index("W"))
            return Call(reduce, (self.in_layout(call.args[0]),), reduce.make_attrs(axis=axes, keepdims=True),
                        call.span)
        if name == "nn.bias_add":
            if call.attrs.axis % 4 != 1:
                return None
            if self.block:
                return self._blocked_bias_add(call)
            return Call(call.op, (self.in_layout(call.args[0]), self.original(call.args[1])),
                        call.op.make_attrs(axis=self.layout.index("C")), call.span)
        if name == "nn.lrn":  # a window over channels: contiguous in NHWC
            if call.attrs.axis % 4 != 1 or self.block:
                return None
            return Call(call.op, (self.in_layout(call.args[0]),),
                        dataclasses.replace(call.attrs, axis=self.layout.index("C")), call.span)
        if name == "image.resize":   # resizes every axis: the per-axis attributes follow the permutation
            return None if self.block else self._resize(call)
        if name == "concatenate":
            axis = _ORIGINAL[call.attrs.axis % 4]
            if self.block and any(int(a.checked_type.shape[1]) % self.block for a in call.args):
                return None   # blocked, a concat along C is one along the outer axis: each part must divide
            return Call(call.op, tuple(self.in_layout(a) for a in call.args),
                        call.op.make_attrs(axis=self.layout.index(axis)), call.span)
        if call.op.pattern <= OpPattern.BROADCAST and name != "broadcast_to":
            return self._elementwise(call)
        return None

    def _blocked_bias_add(self, call: Call) -> Expr | None:
        """bias_add(x, b) with a constant b -> add(x, b as (C/x, 1, 1, x)): no op adds along two axes."""
        bias = self.original(call.args[1])
        if not isinstance(bias, Constant) or bias.ndim != 1:
            return None
        value = bias.value.reshape(-1, self.block).reshape(-1, 1, 1, self.block)
        add = get_op("add")
        return Call(add, (self.in_layout(call.args[0]), Constant(value)), add.make_attrs(), call.span)

    def _blocked_constant(self, value: np.ndarray) -> np.ndarray | None:
        """A 4-D NCHW constant broadcast against NCHW{x}c data: blocked, or None when its C does not divide."""
        if value.shape[1] == 1:   # broadcast along C: along both C axes once blocked
            return value.reshape(*value.shape, 1)
        if value.shape[1] % self.block:
            return None
        return transform_layout(value, _ORIGINAL, self.layout)

    def _resize(self, call: Call) -> Expr | None:
        attrs = call.attrs
        if len(attrs.size) != 4 or len(attrs.scales) not in (0, 4) or (attrs.roi is not None and len(attrs.roi) != 8):
            return None
        order = [_ORIGINAL.index(axis) for axis in self.layout]
        roi = None if attrs.roi is None else (*(attrs.roi[i] for i in order), *(attrs.roi[4 + i] for i in order))
        new_attrs = dataclasses.replace(attrs, size=tuple(attrs.size[i] for i in order), roi=roi,
                                        scales=tuple(attrs.scales[i] for i in order) if attrs.scales else ())
        return Call(call.op, (self.in_layout(call.args[0]),), new_attrs, call.span)

    def _elementwise(self, call: Call) -> Expr | None:
        args = []
        for arg in call.args:
            if id(arg) in self.produced or (arg.checked_type == call.checked_type and not isinstance(arg, Constant)):
                args.append(self.in_layout(arg))
            elif isinstance(arg, Constant) and arg.ndim <= 4 and arg.value.size == 1:
                args.append(arg)
            elif isinstance(arg, Constant) and arg.ndim <= 4:
                padded = arg.value.reshape((1,) * (4 - arg.ndim) + arg.value.shape)
                if not self.block:
                    args.append(Constant(transform_layout(padded, _ORIGINAL, self.layout)))
                elif (blocked := self._blocked_constant(padded)) is not None:
                    args.append(Constant(blocked))
                else:
                    return None
            else:
                return None  # an operand that broadcasts in a way we cannot permute statically
        return Call(call.op, tuple(args), call.attrs, call.span)

    def _conv2d(self, call: Call) -> Expr | None:
        attrs = call.attrs
        if (attrs.data_layout, attrs.kernel_layout) != (_ORIGINAL, "OIHW"):
            return None
        if self.block:
            out_channels, in_channels = (int(d) for d in call.args[1].checked_type.shape[:2])
            if attrs.groups != 1 or out_channels % self.block:
                return None   # stays NCHW: transforms at its edges
            if in_channels % self.block:
                return self._blocked_output_conv2d(call, in_channels)
        data = self.in_layout(call.args[0])
        weight = self.original(call.args[1])
        if isinstance(weight, Constant) and self.block:
            weight = Constant(transform_layout(weight.value, "OIHW", self.kernel_layout))
        elif isinstance(weight, Constant):
            # a read-only view: a pass that rewrites the weight again (cpu_llvm packs it) copies it once,
            # and the executor makes what is left contiguous and aligned when it loads its constants
            permutation = ["OIHW".index(axis) for axis in self.kernel_layout]
            weight = Constant(weight.value.transpose(permutation))
        else:
            weight = _transform(weight, "OIHW", self.kernel_layout)
        new_attrs = dataclasses.replace(attrs, data_layout=self.layout, kernel_layout=self.kernel_layout)
        return Call(call.op, (data, weight), new_attrs, call.span)


    def _blocked_output_conv2d(self, call: Call, in_channels: int) -> Expr:
        """NCHW data into NCHW{x}c output: the input channels as one block (weights OIHW{C}i{x}o)."""
        kernel_layout = f"OIHW{in_channels}i{self.block}o"
        weight = self.original(call.args[1])
        weight = (Constant(transform_layout(weight.value, "OIHW", kernel_layout)) if isinstance(weight, Constant)
                  else _transform(weight, "OIHW", kernel_layout))
        attrs = dataclasses.replace(call.attrs, kernel_layout=kernel_layout, out_layout=self.layout)
        return Call(call.op, (self.original(call.args[0]), weight), attrs, call.span)


def _transform(value: Expr, src: str, dst: str) -> Call:
    op = get_op("layout_transform")
    if isinstance(value, Call) and value.op is op and value.attrs.dst_layout == src:
        inner = value.attrs.src_layout
        if inner == dst:
            return value.args[0]
        return Call(op, value.args, op.make_attrs(src_layout=inner, dst_layout=dst))
    return Call(op, (value,), op.make_attrs(src_layout=src, dst_layout=dst))
