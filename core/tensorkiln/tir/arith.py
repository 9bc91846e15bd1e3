"""tir/arith.py: integer arithmetic facts: constant bounds, linear forms, simplification.

`simplify_expr(e, bounds)` folds constants, drops `x * 1` / `x + 0`, cancels linear
terms (`i * 4 + j - i * 4 -> j`) and uses variable bounds for division facts:
`(a * c + b) // c -> a` and `(a * c + b) % c -> b` when `0 <= b < c`. `bounds` maps a
Var to its inclusive (lo, hi) integer range, e.g. from enclosing loops.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import dtype_of, to_numpy
from . import nodes as n
from .visit import expr_key, rewrite

__all__ = ["const_bounds", "simplify_expr", "as_int", "is_const_int", "linear_form", "wrap_int", "uniform_value",
           "non_negative", "Bounds"]

Bounds = dict  # Var -> (lo, hi) inclusive ints


def as_int(e) -> int | None:
    """The value of an integer constant, else None."""
    if isinstance(e, int) and not isinstance(e, bool):
        return e
    if isinstance(e, n.IntImm) and e.dtype != "bool":
        return e.value
    return None


def is_const_int(e, value: int | None = None) -> bool:
    v = as_int(e)
    return v is not None and (value is None or v == value)


def _is_int_scalar(e: n.PrimExpr) -> bool:
    d = dtype_of(e.dtype)
    return d.lanes == 1 and d.is_int


def const_bounds(e: n.PrimExpr, bounds: Bounds) -> tuple[int, int] | None:
    """Inclusive integer bounds of an integer expression, or None when unknown."""
    if isinstance(e, n.IntImm):
        return (e.value, e.value)
    if isinstance(e, n.Var):
        return bounds.get(e)
    if isinstance(e, n.Cast):
        inner = const_bounds(e.value, bounds) if dtype_of(e.value.dtype).is_int else None
        if inner is None or not dtype_of(e.dtype).is_int:
            return None
        # a narrowing cast wraps: its bounds hold only when both ends fit the new dtype
        return inner if _fits(e.dtype, inner[0]) and _fits(e.dtype, inner[1]) else None
    if isinstance(e, (n.Add, n.Sub, n.Mul, n.Min, n.Max)):
        a, b = const_bounds(e.a, bounds), const_bounds(e.b, bounds)
        if a is None or b is None:
            return None
        if isinstance(e, n.Add):
            return (a[0] + b[0], a[1] + b[1])
        if isinstance(e, n.Sub):
            return (a[0] - b[1], a[1] - b[0])
        if isinstance(e, n.Min):
            return (min(a[0], b[0]), min(a[1], b[1]))
        if isinstance(e, n.Max):
            return (max(a[0], b[0]), max(a[1], b[1]))
        products = [x * y for x in a for y in b]
        return (min(products), max(products))
    if isinstance(e, (n.FloorDiv, n.FloorMod, n.Div)):
        a, c = const_bounds(e.a, bounds), as_int(e.b)
        if c is None or c <= 0:
            return None
        if isinstance(e, n.FloorMod):
            if a is not None and a[0] >= 0 and a[1] < c:
                return a
            return (0, c - 1)
        if a is None:
            return None
        if isinstance(e, n.Div) and a[0] < 0:
            return (-((-a[0]) // c), a[1] // c if a[1] >= 0 else -((-a[1]) // c))
        return (a[0] // c, a[1] // c)
    if isinstance(e, n.Select):
        a, b = const_bounds(e.true_value, bounds), const_bounds(e.false_value, bounds)
        if a is None or b is None:
            return None
        return (min(a[0], b[0]), max(a[1], b[1]))
    return None


# ---- linear forms over integer atoms --------------------------------------------------

def linear_form(e: n.PrimExpr) -> tuple[dict, int]:
    """e == sum(coeff * atom) + const; returns ({key: [atom, coeff]}, const)."""
    terms, const = _linear_terms(e)
    return {key: [atom, coeff] for key, (atom, coeff) in terms.items() if coeff != 0}, const


def _linear_terms(x) -> tuple[dict, int]:
    """The linear form of `x` with zero coefficients kept, terms in order of first appearance
    (depth first), kept on the node: the simplifier asks for the form of every Add on an index
    chain, and walking the whole chain each time was quadratic. Zero terms stay so that a term
    cancelled in one operand and added back by the other keeps its first position, as a single
    walk of the tree would give."""
    cached = x.__dict__.get("_linear_terms") if isinstance(x, (n.Add, n.Sub, n.Mul)) else None
    if cached is not None:
        return cached
    if isinstance(x, n.IntImm):
        return {}, x.value
    if isinstance(x, (n.Add, n.Sub)):
        terms, const = _linear_terms(x.a)
        other, other_const = _linear_terms(x.b)
        sign = 1 if isinstance(x, n.Add) else -1
        terms = dict(terms)
        for key, (atom, coeff) in other.items():
            known = terms.get(key)
            terms[key] = (atom, sign * coeff) if known is None else (known[0], known[1] + sign * coeff)
        result = (terms, const + sign * other_const)
    elif isinstance(x, n.Mul) and (as_int(x.b) is not None or as_int(x.a) is not None):
        scale, inner = (as_int(x.b), x.a) if as_int(x.b) is not None else (as_int(x.a), x.b)
        terms, const = _linear_terms(inner)
        result = ({key: (atom, coeff * scale) for key, (atom, coeff) in terms.items()}, const * scale)
    else:
        return {expr_key(x): (x, 1)}, 0
    object.__setattr__(x, "_linear_terms", result)
    return result


_WRAPPING: dict[str, tuple[int, int] | None] = {}   # dtype -> (modulus, half a signed one's modulus); None: bool


def wrap_int(dtype: str, value: int) -> int:
    """`value` wrapped into an integer dtype's range (two's complement), as C and numpy do:
    wrap_int("int8", 128) == -128, wrap_int("uint8", -1) == 255."""
    try:
        wrapping = _WRAPPING[dtype]
    except KeyError:   # the simplifier wraps every coefficient it writes: the dtype is parsed once
        d = dtype_of(dtype)
        wrapping = None if d.is_bool else (1 << d.bits, (1 << d.bits) >> 1 if d.is_signed else 0)
        _WRAPPING[dtype] = wrapping
    if wrapping is None:
        return int(bool(value))
    modulus, half = wrapping
    return (int(value) + half) % modulus - half


def _fits(dtype: str, value: int) -> bool:
    return wrap_int(dtype, value) == value


def _signed_form(dtype: str, value: int) -> tuple[bool, int]:
    """(negate, magnitude) spelling `value` in dtype: `+ magnitude` or `- magnitude`, whichever
    immediate is smaller and positive (`x + -5` is `x - 5`; in uint8, `x + 255` is `x - 1`)."""
    plain, negated = wrap_int(dtype, value), wrap_int(dtype, -value)
    if negated > 0 and (plain < 0 or negated < plain):
        return True, negated
    return False, plain


def _build_linear(terms, const: int, dtype: str) -> n.PrimExpr:
    # Add, Sub and Mul wrap, so coefficients and the constant are exact modulo 2**bits:
    # every immediate is wrapped into the dtype's range.
    result = None
    for atom, coeff in terms:
        if wrap_int(dtype, coeff) == 0:
            continue
        if result is None:
            negate, magnitude = False, wrap_int(dtype, coeff)
        else:
            negate, magnitude = _signed_form(dtype, coeff)
        term = atom if magnitude == 1 else n.Mul(atom, n.IntImm(dtype, magnitude))
        if result is None:
            result = term
        else:
            result = n.Sub(result, term) if negate else n.Add(result, term)
    if result is None:
        return n.IntImm(dtype, wrap_int(dtype, const))
    if wrap_int(dtype, const) == 0:
        return result
    negate, magnitude = _signed_form(dtype, const)
    return n.Sub(result, n.IntImm(dtype, magnitude)) if negate else n.Add(result, n.IntImm(dtype, magnitude))


def _linear_bounds(terms, const: int, bounds: Bounds) -> tuple[int, int] | None:
    lo = hi = const
    for atom, coeff in terms:
        b = const_bounds(atom, bounds)
        if b is None:
            return None
        x, y = b[0] * coeff, b[1] * coeff
        lo += min(x, y)
        hi += max(x, y)
    return lo, hi


# ---- simplification ----------------------------------------------------------------

def _fold(e: n.BinaryOp, x, y):
    t = type(e)
    if t is n.Add: return x + y
    if t is n.Sub: return x - y
    if t is n.Mul: return x * y
    if t is n.Min: return min(x, y)
    if t is n.Max: return max(x, y)
    if t is n.EQ: return x == y
    if t is n.NE: return x != y
    if t is n.LT: return x < y
    if t is n.LE: return x <= y
    if t is n.GT: return x > y
    if t is n.GE: return x >= y
    if t is n.And: return bool(x) and bool(y)
    if isinstance(e, n.BITWISE_OPS):
        return _fold_bits(t, x, y, e.dtype)
    if t is n.Or: return bool(x) or bool(y)
    if y == 0:
        return None
    if t is n.FloorDiv: return x // y if isinstance(x, int) else math.floor(x / y)
    if t is n.FloorMod: return x % y
    if t is n.Div:
        if isinstance(x, int) and isinstance(y, int):
            q = abs(x) // abs(y)
            return q if (x >= 0) == (y >= 0) else -q
        return x / y
    return None


def _fold_bits(t: type, x, y, dtype: str):
    """Python ints are infinite two's complement, so &, |, ^ and >> of in-range values match the
    machine; << wraps when _imm builds the immediate. Shift amounts outside [0, bits) stay unfolded
    (undefined in tir, see nodes.ShiftLeft)."""
    if not (isinstance(x, int) and isinstance(y, int)):
        return None
    if t is n.BitAnd: return x & y
    if t is n.BitOr: return x | y
    if t is n.BitXor: return x ^ y
    if not 0 <= y < dtype_of(dtype).bits:
        return None
    return x << y if t is n.ShiftLeft else x >> y


def _imm(dtype: str, value) -> n.PrimExpr:
    d = dtype_of(dtype)
    if d.is_bool:
        return n.IntImm("bool", int(bool(value)))
    if d.is_float:
        return n.FloatImm(dtype, float(to_numpy(dtype).type(value)))
    return n.IntImm(dtype, wrap_int(dtype, value))


def uniform_value(e):
    """The constant of `e`, or of every lane of a broadcast constant; else None."""
    return _const_value(e.value if isinstance(e, n.Broadcast) else e)


def non_negative(e, known: "set[int] | frozenset[int]" = frozenset()) -> bool:
    """A conservative proof that integer expression `e` is >= 0 (on every lane), for code generators:
    a floor division or modulo of a non-negative value by a positive constant is a plain unsigned one.

    `known` holds the ids of the variables known to be >= 0 (loops from a non-negative start, lets of a
    non-negative value: the emitter knows where they are bound); unsigned variables always are."""
    if e.dtype in ("void", "handle"):
        return False
    if isinstance(e, n.IntImm):
        return e.value >= 0
    if isinstance(e, n.Var):
        return id(e) in known or not dtype_of(e.dtype).is_signed
    if isinstance(e, (n.Add, n.Mul, n.Div, n.FloorDiv, n.Min, n.Max)):
        if isinstance(e, n.Max) and (non_negative(e.a, known) or non_negative(e.b, known)):
            return True
        return non_negative(e.a, known) and non_negative(e.b, known)
    if isinstance(e, n.FloorMod):
        return (uniform_value(e.b) or 0) > 0 or (non_negative(e.a, known) and non_negative(e.b, known))
    if isinstance(e, n.Ramp):
        return non_negative(e.base, known) and non_negative(e.stride, known)
    if isinstance(e, n.Broadcast):
        return non_negative(e.value, known)
    if isinstance(e, n.Select):
        return non_negative(e.true_value, known) and non_negative(e.false_value, known)
    if isinstance(e, n.Cast):
        return dtype_of(e.dtype).is_int and non_negative(e.value, known)
    return dtype_of(e.dtype).is_int and not dtype_of(e.dtype).is_signed


def _const_value(e):
    if isinstance(e, n.IntImm):
        return bool(e.value) if e.dtype == "bool" else e.value
    if isinstance(e, n.FloatImm):
        return e.value
    return None


def _simplify_node(e, bounds: Bounds):
    """One bottom-up step: children are already simplified. Returns None to keep e."""
    if isinstance(e, n.BinaryOp):
        a, b = e.a, e.b
        ca, cb = _const_value(a), _const_value(b)
        if ca is not None and cb is not None and e.lanes == 1:
            value = _fold(e, ca, cb)
            if value is not None:
                return _imm(e.dtype, value)
        if isinstance(e, n.CompareOp) and not isinstance(e, (n.And, n.Or)):
            return _simplify_compare(e, bounds)
        if isinstance(e, (n.And, n.Or)):
            for x, y in ((ca, b), (cb, a)):
                if x is not None:
                    if isinstance(e, n.And):
                        return y if x else n.IntImm("bool", 0)
                    return n.IntImm("bool", 1) if x else y
            return None
        if isinstance(e, n.BITWISE_OPS):
            return None  # only constants fold; the integer rules below are for arithmetic
        if _is_int_scalar(e):
            return _simplify_int(e, bounds)
        # floats and vectors: only identities that are exact but for the sign of a zero. A broadcast
        # constant counts: the zeros a folded select leaves in a transform row (Winograd's B^T d)
        # would otherwise reach LLVM, which keeps `fadd x, 0.0` (exact only without signed zeros).
        ua, ub = uniform_value(a), uniform_value(b)
        if isinstance(e, (n.Add, n.Sub)) and ub == 0:
            return a
        if isinstance(e, n.Add) and ua == 0:
            return b
        if isinstance(e, (n.Mul, n.Div)) and ub == 1:
            return a
        if isinstance(e, n.Mul) and ua == 1:
            return b
        if isinstance(e, (n.Add, n.Sub)) and isinstance(b, n.Sub) and uniform_value(b.a) == 0:
            # a + (0 - c) -> a - c, a - (0 - c) -> a + c
            return (n.Sub if isinstance(e, n.Add) else n.Add)(a, b.b)
        if isinstance(e, n.Add) and isinstance(a, n.Sub) and uniform_value(a.a) == 0:
            return n.Sub(b, a.b)    # (0 - c) + b -> b - c
        return None
    if isinstance(e, n.Select):
        c = uniform_value(e.condition)
        if c is not None:
            return e.true_value if c else e.false_value
        return None
    if isinstance(e, n.Cast):
        if e.value.dtype == e.dtype:
            return e.value
        c = _const_value(e.value)
        if c is not None and e.lanes == 1:
            if dtype_of(e.dtype).is_int and isinstance(c, float):
                c = math.trunc(c)
            return _imm(e.dtype, c)
        return None
    if isinstance(e, n.Not):
        c = _const_value(e.a)
        if c is not None:
            return n.IntImm("bool", int(not c))
    if isinstance(e, n.Load) and e.predicate is not None and uniform_value(e.predicate) is True:
        return n.Load(e.buffer, e.index)
    if isinstance(e, n.Ramp) and is_const_int(e.stride, 0):
        return n.Broadcast(e.base, e.lanes_count)
    return None


def _simplify_compare(e, bounds):
    if not (_is_int_scalar(e.a) and _is_int_scalar(e.b)):
        return None
    terms, const = linear_form(n.Sub(e.a, e.b))
    diff = _linear_bounds(terms.values(), const, bounds)
    if diff is None:
        return None
    lo, hi = diff
    t = type(e)
    truth = None
    if t is n.LT:
        truth = True if hi < 0 else False if lo >= 0 else None
    elif t is n.LE:
        truth = True if hi <= 0 else False if lo > 0 else None
    elif t is n.GT:
        truth = True if lo > 0 else False if hi <= 0 else None
    elif t is n.GE:
        truth = True if lo >= 0 else False if hi < 0 else None
    elif t is n.EQ:
        truth = True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
    elif t is n.NE:
        truth = False if lo == hi == 0 else True if lo > 0 or hi < 0 else None
    return None if truth is None else n.IntImm("bool", int(truth))


def _merge_div_mod(terms: dict) -> None:
    """m * (x // c) * c + m * (x % c) -> m * x, in place on a linear form."""
    for key, (atom, coeff) in list(terms.items()):
        if key not in terms or not isinstance(atom, n.FloorMod) or as_int(atom.b) is None:
            continue
        c = as_int(atom.b)
        div_key = expr_key(n.FloorDiv(atom.a, atom.b))
        if div_key in terms and terms[div_key][1] == coeff * c:
            del terms[key], terms[div_key]
            x_key = expr_key(atom.a)
            if x_key in terms:
                terms[x_key][1] += coeff
            else:
                terms[x_key] = [atom.a, coeff]


_UNKNOWN = object()


def _linear_rewrite(e):
    """The canonical linear form of an integer Add/Sub/Mul, or None when `e` already is one.

    It depends on the node alone (no bounds), and nodes are immutable, so it is kept on the
    node: the pipeline simplifies twice and shares subtrees, and re-deriving the form of every
    unchanged index expression was most of the simplifier's time."""
    cached = e.__dict__.get("_linear_rewrite", _UNKNOWN)
    if cached is not _UNKNOWN:
        return cached
    terms, const = linear_form(e)
    _merge_div_mod(terms)
    ordered = list(terms.values())
    if _is_built_linear(e, ordered, const, e.dtype):
        result = None
    else:
        rebuilt = _build_linear(ordered, const, e.dtype)
        result = rebuilt if expr_key(rebuilt) != expr_key(e) else None
    object.__setattr__(e, "_linear_rewrite", result)
    return result


def _is_built_linear(e, terms, const: int, dtype: str) -> bool:
    """Whether `e` already is what `_build_linear(terms, const, dtype)` would build (equal expr_keys),
    checked along e's chain without building it: three in four index expressions the simplifier
    meets are, and building each one again to compare keys was a third of its time. False may also
    mean "not sure": the caller then builds and compares."""
    spelled = []   # (negate, atom, magnitude) of each term, as _build_linear spells them
    for atom, coeff in terms:
        if wrap_int(dtype, coeff) == 0:
            continue
        negate, magnitude = _signed_form(dtype, coeff) if spelled else (False, wrap_int(dtype, coeff))
        spelled.append((negate, atom, magnitude))
    constant = wrap_int(dtype, const)
    if not spelled:
        return False
    node = e
    if constant != 0:
        negate, magnitude = _signed_form(dtype, const)
        if type(node) is not (n.Sub if negate else n.Add) or not _is_imm(node.b, dtype, magnitude):
            return False
        node = node.a
    for negate, atom, magnitude in reversed(spelled[1:]):
        if type(node) is not (n.Sub if negate else n.Add) or not _is_term(node.b, atom, magnitude, dtype):
            return False
        node = node.a
    return _is_term(node, spelled[0][1], spelled[0][2], dtype)


def _is_imm(x, dtype: str, value: int) -> bool:
    return type(x) is n.IntImm and x.dtype == dtype and x.value == value


def _is_term(x, atom, magnitude: int, dtype: str) -> bool:
    """Whether `x` is `atom` (magnitude 1) or `atom * magnitude`, as _build_linear writes a term."""
    if magnitude != 1:
        if type(x) is not n.Mul or not _is_imm(x.b, dtype, magnitude):
            return False
        x = x.a
    return x is atom or expr_key(x) == expr_key(atom)


def _simplify_int(e, bounds):
    a, b = e.a, e.b
    dtype = e.dtype
    if isinstance(e, (n.Add, n.Sub, n.Mul)):
        if isinstance(e, n.Mul) and as_int(a) is None and as_int(b) is None:
            return None
        return _linear_rewrite(e)
    if isinstance(e, (n.Min, n.Max)):
        ba, bb = const_bounds(a, bounds), const_bounds(b, bounds)
        if ba is not None and bb is not None:
            if isinstance(e, n.Min):
                if ba[1] <= bb[0]: return a
                if bb[1] <= ba[0]: return b
            else:
                if ba[0] >= bb[1]: return a
                if bb[0] >= ba[1]: return b
        if expr_key(a) == expr_key(b):
            return a
        terms, const = linear_form(n.Sub(a, b))
        diff = _linear_bounds(terms.values(), const, bounds)
        if diff is not None:
            if diff[1] <= 0:
                return a if isinstance(e, n.Min) else b
            if diff[0] >= 0:
                return b if isinstance(e, n.Min) else a
        return None
    c = as_int(b)
    if c is None or c <= 0:
        return None
    if isinstance(e, n.Div):
        ba = const_bounds(a, bounds)
        if ba is None or ba[0] < 0:
            return a if c == 1 else None
        e = n.FloorDiv(a, b)
    if c == 1:
        return a if isinstance(e, n.FloorDiv) else n.IntImm(dtype, 0)
    if (isinstance(e, n.FloorDiv) and isinstance(a, n.FloorDiv) and as_int(a.b) is not None and as_int(a.b) > 0
            and _fits(dtype, as_int(a.b) * c)):
        return n.FloorDiv(a.a, n.IntImm(dtype, as_int(a.b) * c))
    terms, const = linear_form(a)
    whole = [(atom, coeff) for atom, coeff in terms.values() if coeff % c == 0]
    rest = [(atom, coeff) for atom, coeff in terms.values() if coeff % c != 0]
    rest_bounds = _linear_bounds(rest, const % c, bounds)
    if rest_bounds is not None and rest_bounds[0] >= 0 and rest_bounds[1] < c:
        if isinstance(e, n.FloorDiv):
            return _build_linear([(atom, coeff // c) for atom, coeff in whole], const // c, dtype)
        return _build_linear(rest, const % c, dtype)
    if whole and rest:
        # keep the part that divides outside: (a*c + r) // c == a + r // c (floor semantics)
        inner = _build_linear(rest, const, dtype)
        if isinstance(e, n.FloorDiv):
            return n.Add(_build_linear([(atom, coeff // c) for atom, coeff in whole], 0, dtype),
                         n.FloorDiv(inner, b))
        return n.FloorMod(inner, b)
    return None


_LEAVES = frozenset({n.IntImm, n.FloatImm, n.Var, n.StringImm})


class SimplifyMemo:
    """What simplify_expr calls under the same bounds share: each node's simplified form (rewrite's
    memo) and the nodes already simplified. The statements of one loop body read the same
    subexpressions (an unrolled tile's rows share the weight index), each simplified once."""

    __slots__ = ("rewritten", "settled")

    def __init__(self) -> None:
        self.rewritten: dict[int, tuple] = {}
        self.settled: dict[int, n.PrimExpr] = {}


def simplify_expr(e: n.PrimExpr, bounds: Bounds | None = None, memo: SimplifyMemo | None = None) -> n.PrimExpr:
    """Simplify an expression bottom-up (see the module docstring).

    `memo`: shared by calls with the same `bounds` (tir/passes/simplify.py keeps one per loop body)."""
    bounds = bounds or {}
    memo = memo or SimplifyMemo()
    # Nodes already simplified (kept alive, so their ids stay theirs): when a rule builds a new
    # node over simplified children, only the new part is simplified again. Re-walking the
    # whole subtree after every rule made deep index expressions quadratic (a third of compile time).
    settled = memo.settled
    rewritten = memo.rewritten

    def keep_settled(z):
        return z if settled.get(id(z)) is z else None

    def one_step(z):
        return _simplify_node(z, bounds) if isinstance(z, n.PrimExpr) else None

    def post(x):
        if type(x) in _LEAVES or not isinstance(x, n.PrimExpr):
            return None   # no rule rewrites a leaf: a third of the nodes, each through every rule's test
        # iterate to a fixed point: one rule's output may enable another
        for _ in range(4):
            y = _simplify_node(x, bounds)
            if y is None or y is x:
                break
            x = rewrite(y, pre=keep_settled, post=one_step) if isinstance(y, n.BinaryOp) else y
        settled[id(x)] = x
        return x

    def taken_branch(x):
        # A select whose condition folds (an unrolled loop index against a constant, as in
        # Winograd's transform matrices) keeps one branch: the other is never simplified, so
        # selects over a matrix's rows cost the taken row, not every row.
        if not isinstance(x, n.Select):
            return None
        condition = rewrite(x.condition, pre=taken_branch, post=post, memo=rewritten)
        taken = uniform_value(condition)
        if taken is not None:
            return rewrite(x.true_value if taken else x.false_value, pre=taken_branch, post=post, memo=rewritten)
        # both branches stay: built here on the condition simplified above, not simplified twice
        branches = (rewrite(value, pre=taken_branch, post=post, memo=rewritten)
                    for value in (x.true_value, x.false_value))
        return post(n.Select(condition, *branches))
    try:
        return rewrite(e, pre=taken_branch, post=post, memo=rewritten)
    finally:
        del taken_branch   # it refers to itself through its closure: no cycle left for the GC (tir/visit.py)


def numpy_dtype_of(dtype: str) -> np.dtype:
    return to_numpy(dtype_of(dtype).element)
