"""passes/mixed_precision.py: run the compute-heavy ops of a float32 graph in float16 or bfloat16.

In the manner of TVM's ToMixedPrecision and PyTorch AMP, every op is in one of three lists:

- ALWAYS: worth running in low precision (convolutions, dense, matmul): their float32
  inputs are cast down and their result stays low. Their computes accumulate in float32
  (`tensorkiln.ops._common.accumulate_dtype`), so only storage and multiplies are low.
- FOLLOW: cheap ops whose precision does not matter much (elementwise, pooling, data
  movement): low when one of their float inputs already is, else float32.
- NEVER: reductions, softmax, normalizations and precision-sensitive math (exp, log,
  pow, ...): always float32. An op in no list is NEVER too.

The seed's example (section 1.2) becomes exactly

    %0 = cast(%data, dtype="float16")
    %1 = cast(%weight, dtype="float16")
    %2 = nn.conv2d(%0, %1)
    cast(%2, dtype="float32")

Casts appear only where a low-precision region meets a float32 one (and at the function's
result, which keeps its original dtype); each producer is cast once however many users
it has, a cast the pass inserted is undone rather than stacked (low -> f32 -> low is the
low value itself), and constants are converted at compile time instead of cast.

The lists are refined, in order: by the target (the pass does nothing when the target's
manifest does not list the low dtype, and an op the target's `tensorkiln_supported_ops`
predicate refuses in low precision stays float32), then by the pass config:

    PassContext(config={"to_mixed_precision": {"dtype": "bfloat16", "never": ["nn.dense"]}})

or directly `to_mixed_precision(mod, "float16", policy=MixedPrecisionPolicy(...))`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..graph import Call, Constant, Expr, Function, Module, Tuple, TupleGetItem, Var, post_order
from ..graph.builder import call, cast
from ..graph.registry import Op
from ..graph.types import TensorType
from ..ir.dtypes import to_numpy
from ..ir.errors import TensorkilnError
from .manager import register_pass

__all__ = ["MixedPrecisionPolicy", "DEFAULT_POLICY", "LOW_PRECISION_DTYPES", "to_mixed_precision", "policy_for"]

LOW_PRECISION_DTYPES = ("float16", "bfloat16")
_ORIGINAL = "float32"


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """Which ops run in low precision: `always`, `follow` (their inputs' precision) or `never`."""

    always: frozenset[str]
    follow: frozenset[str]
    never: frozenset[str] = frozenset()

    def category(self, op_name: str) -> str:
        """"always", "follow" or "never" (the default for an unlisted op)."""
        if op_name in self.never:
            return "never"
        if op_name in self.always:
            return "always"
        return "follow" if op_name in self.follow else "never"

    def refined(self, always=(), follow=(), never=()) -> "MixedPrecisionPolicy":
        """A copy with the named ops moved into the given lists (later arguments win)."""
        lists = {"always": set(self.always), "follow": set(self.follow), "never": set(self.never)}
        for name, ops in (("always", always), ("follow", follow), ("never", never)):
            for op in ops:
                for members in lists.values():
                    members.discard(op)
                lists[name].add(op)
        return MixedPrecisionPolicy(*(frozenset(lists[k]) for k in ("always", "follow", "never")))


DEFAULT_POLICY = MixedPrecisionPolicy(
    always=frozenset({"nn.conv2d", "nn.conv2d_transpose", "nn.dense", "nn.matmul"}),
    follow=frozenset({
        # elementwise and broadcast arithmetic whose error does not grow
        "add", "subtract", "multiply", "maximum", "minimum", "negative", "abs", "clip", "where",
        "nn.bias_add", "nn.relu", "nn.leaky_relu", "nn.prelu", "nn.hard_sigmoid", "nn.hard_swish", "copy",
        # pooling (max is exact; the average's sum accumulates in float32 inside its compute)
        "nn.max_pool2d", "nn.global_max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d",
        # data movement: exact in any precision
        "reshape", "transpose", "squeeze", "expand_dims", "concatenate", "strided_slice", "take",
        "broadcast_to", "tile", "reverse", "nn.pad", "layout_transform", "image.resize",
    }),
    # Listed for the reader; every unlisted op is "never" anyway.
    never=frozenset({
        "nn.softmax", "nn.log_softmax", "nn.batch_norm", "nn.layer_norm", "nn.lrn",
        "sum", "mean", "prod", "cumsum", "exp", "log", "power", "erf", "divide", "sqrt", "rsqrt",
        "reciprocal", "sigmoid", "tanh", "nn.gelu", "nn.softplus", "nn.elu", "nn.selu", "nn.mish",
    }),
)


def policy_for(dtype: str, target=None, config: dict | None = None,
               base: MixedPrecisionPolicy = DEFAULT_POLICY) -> MixedPrecisionPolicy:
    """`base` refined by the config's "always" / "follow" / "never" lists (the target refines per call)."""
    config = config or {}
    unknown = set(config) - {"dtype", "always", "follow", "never"}
    if unknown:
        raise TensorkilnError(f"to_mixed_precision: unknown config keys {sorted(unknown)}; "
                              "use dtype, always, follow, never")
    return base.refined(config.get("always", ()), config.get("follow", ()), config.get("never", ()))


@register_pass("to_mixed_precision", opt_level=1)
def _mixed_precision_pass(mod: Module, target=None, config: dict | None = None) -> Module:
    """Run convolutions and dense ops (and what follows them) in float16 or bfloat16 (config: dtype)."""
    if not config:
        return mod   # in a pipeline, the pass runs only when the context configures it
    return to_mixed_precision(mod, config.get("dtype", "float16"), target=target, policy=policy_for(
        config.get("dtype", "float16"), target, config))


def to_mixed_precision(mod: Module | Expr, dtype: str = "float16", *, target=None,
                       policy: MixedPrecisionPolicy = DEFAULT_POLICY) -> Module:
    """`mod` with the ops `policy` allows in `dtype` ("float16" or "bfloat16"); see the module doc."""
    if dtype not in LOW_PRECISION_DTYPES:
        raise TensorkilnError(f"to_mixed_precision: dtype {dtype!r} is not a low-precision float; "
                              f"use one of {', '.join(LOW_PRECISION_DTYPES)}")
    if isinstance(mod, Expr):
        mod = Module.from_expr(mod)
    if target is not None and dtype not in target.capabilities.dtypes:
        return mod   # the target cannot store the dtype: nothing to gain, everything to break
    main = _Converter(dtype, policy, _target_check(target)).convert(mod.main)
    return mod if main is mod.main else mod.with_function("main", main)


def _target_check(target):
    """predicate(call) -> bool: may this low-precision call run on `target` (its supported_ops hook)."""
    if target is None:
        return lambda _call: True
    from ..sdk.plugin_manager import registry
    predicates: dict[str, list] = {}
    for table in registry().call("tensorkiln_supported_ops", target):
        for name, predicate in (table or {}).items():
            predicates.setdefault(name, []).append(predicate)
    return lambda node: all(p(node) is True for p in predicates.get(node.op.name, ()))


def _widened(value: Expr) -> Expr | None:
    """The operand of `value` when `value` is a cast from a low-precision float to float32: casting
    back down gives that operand exactly, so the round trip is dropped."""
    if isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "cast" \
            and value.checked_type.dtype == _ORIGINAL and value.args[0].checked_type.dtype in LOW_PRECISION_DTYPES:
        return value.args[0]
    return None


def _is_float32(expr: Expr) -> bool:
    return isinstance(expr.checked_type, TensorType) and expr.checked_type.dtype == _ORIGINAL


class _Converter:
    """Rebuilds the function bottom-up; each rebuilt tensor is either float32 or the low dtype."""

    def __init__(self, dtype: str, policy: MixedPrecisionPolicy, allowed) -> None:
        self.dtype, self.policy, self.allowed = dtype, policy, allowed
        self.rebuilt: dict[int, Expr] = {}              # id(original) -> rebuilt, in its chosen precision
        self.as_dtype: dict[tuple[int, str], Expr] = {}  # (id(original), dtype) -> the one cast users share
        self.inserted: dict[int, Expr] = {}              # id(inserted cast) -> its operand

    def convert(self, function: Function) -> Function:
        for node in post_order(function.body):
            self.rebuilt[id(node)] = self._visit(node)
        body = function.body
        result = self.in_dtype(body, body.checked_type.dtype) if isinstance(body.checked_type, TensorType) \
            else self.rebuilt[id(body)]
        if result is body:
            return function
        return Function(function.params, result, function.attrs)

    def in_dtype(self, node: Expr, dtype: str) -> Expr:
        """The rebuilt `node` in `dtype`: itself, an inserted cast undone, a converted constant or a shared cast."""
        value = self.rebuilt[id(node)]
        if value.checked_type.dtype == dtype:
            return value
        undone = self.inserted.get(id(value)) or _widened(value)
        if undone is not None and undone.checked_type.dtype == dtype:
            return undone
        key = (id(node), dtype)
        if key not in self.as_dtype:
            if isinstance(value, Constant):
                self.as_dtype[key] = Constant(value.value.astype(to_numpy(dtype)))
            else:
                converted = cast(value, dtype)
                self.inserted[id(converted)] = value
                self.as_dtype[key] = converted
        return self.as_dtype[key]

    def _visit(self, node: Expr) -> Expr:
        if isinstance(node, Call) and isinstance(node.op, Op):
            return self._visit_call(node)
        if isinstance(node, Tuple):   # tuples and their items stay in the original precision
            return Tuple(tuple(self._original(f) for f in node.fields))
        if isinstance(node, TupleGetItem):
            return TupleGetItem(self.rebuilt[id(node.tuple_value)], node.index)
        if isinstance(node, Call):
            return dataclasses.replace(node, args=tuple(self._original(a) for a in node.args))
        return node   # Var, Constant, nested Function

    def _original(self, node: Expr) -> Expr:
        if isinstance(node.checked_type, TensorType):
            return self.in_dtype(node, node.checked_type.dtype)
        return self.rebuilt[id(node)]

    def _visit_call(self, node: Call) -> Expr:
        floats = [i for i, a in enumerate(node.args) if _is_float32(a)]
        category = self.policy.category(node.op.name)
        low = bool(floats) and _is_float32(node) and (
            category == "always" or (category == "follow" and any(
                self.rebuilt[id(node.args[i])].checked_type.dtype == self.dtype for i in floats)))
        if low:
            args = tuple(self.in_dtype(a, self.dtype) if i in floats else self._original(a)
                         for i, a in enumerate(node.args))
            try:
                candidate = call(node.op.name, *args, attrs=node.attrs, span=node.span)
            except TensorkilnError:   # the op's type rule refuses the low dtype: it stays float32
                candidate = None
            if candidate is not None and self.allowed(candidate):
                return candidate
        args = tuple(self._original(a) for a in node.args)
        if all(a is b for a, b in zip(args, node.args)):
            return node
        return dataclasses.replace(node, args=args)
