"""exprs.py: tir expressions -> LLVM values (scalars and vectors), one `visit_<Node>` method per node type.

`ExprCodegen` holds what an expression can refer to: loop and let variables
(`self.vars`) and buffer base pointers (`self.buffers`). Statement codegen
(`stmts.py`) extends it.
"""
from __future__ import annotations

import llvmlite.ir as ir

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of, with_lanes
from tensorkiln.ir.errors import CompileError
from tensorkiln.tir.visit import expr_key

from .lane_masks import split_predicate
from .cgutils import I1, I32, I64, PTR, alloca_in_entry, const_of, declare, element_type, lanes_of, memory_type, splat, value_type
from .math_calls import MATH_NAMES, emit_math_call

_INDEX_ARITHMETIC = frozenset({tir.Add, tir.Sub, tir.Mul, tir.Div, tir.FloorDiv, tir.FloorMod, tir.Min, tir.Max})
_INDEX_LEAVES = frozenset({tir.IntImm, tir.Var})
_INDEX_DTYPES = frozenset({"int32", "int64"})

__all__ = ["ExprCodegen"]

STRIDED_LOAD_MAX = 4
"""Loads of a Ramp with a constant stride up to this read one contiguous span and shuffle; wider
strides gather (the span would read mostly unused elements)."""


class ExprCodegen(tir.ExprFunctor):
    """Emit expressions with `builder`; intrinsic calls go to `call_intrinsic(builder, call, args)`."""

    def __init__(self, module: ir.Module, builder: ir.IRBuilder, call_intrinsic) -> None:
        self.module = module
        self.builder = builder
        self.call_intrinsic = call_intrinsic
        self.vars: dict[tir.Var, ir.Value] = {}
        self.non_negative_vars: set[int] = set()   # ids of the loop and let variables known to be >= 0
        self.buffers: dict[tir.Buffer, ir.Value] = {}
        self._index_depth = 0     # > 0 while an element index is emitted (`index_value`)
        # Integer arithmetic of loop and let variables already emitted in the current basic block, by
        # structure (`_reused`): the statements of a loop body compute the same index terms (the rows
        # of an unrolled register tile all read one weight index), and emitting each once makes less
        # IR for Python to build and print and for LLVM to parse and clean up.
        self._emitted: dict[tuple, ir.Value] = {}
        self._emitted_block = None
        self._pure: dict[int, tuple] = {}
        self._zero_slots: dict[tuple, tuple] = {}   # (function id, type) -> (function, zeroed stack slot)

    # -- entry point ------------------------------------------------------------------------

    def expr(self, node: tir.PrimExpr) -> ir.Value:
        if type(node) in _INDEX_ARITHMETIC and node.dtype in _INDEX_DTYPES and self._is_index_arithmetic(node):
            return self._reused(node)
        return self.visit_expr(node)

    def forget_emitted(self) -> None:
        """Drop the reusable values: a variable is (re)bound, so values computed from it may be stale."""
        self._emitted.clear()

    def _is_index_arithmetic(self, node) -> bool:
        """Whether `node` is integer arithmetic of constants and variables only (no load, no call)."""
        known = self._pure.get(id(node))
        if known is None:
            pure = all(type(child) in _INDEX_LEAVES or (type(child) in _INDEX_ARITHMETIC
                                                       and self._is_index_arithmetic(child))
                       for child in (node.a, node.b))
            known = self._pure[id(node)] = (node, pure)   # the node is kept: its id stays its own
        return known[1]

    def _reused(self, node) -> ir.Value:
        """`node`'s value, emitted once per basic block (values of another block may not dominate this one)."""
        block = self.builder.block
        if block is not self._emitted_block:
            self._emitted.clear()
            self._emitted_block = block
        key = (expr_key(node), self._index_depth > 0)   # `nsw` only inside an index (_int_flags)
        value = self._emitted.get(key)
        if value is None:
            value = self.visit_expr(node)
            if self.builder.block is block:   # it emitted no branch: its value is defined in this block
                self._emitted[key] = value
        return value

    def visit_default(self, node) -> None:
        if isinstance(node, tir.Stmt):
            raise CompileError(f"cpu_llvm cannot compile statement {type(node).__name__}:\n{node}")
        raise CompileError(f"cpu_llvm cannot compile expression {type(node).__name__}: {node}")

    # -- conversions --------------------------------------------------------------------------

    def cast(self, value: ir.Value, source: str, target: str) -> ir.Value:
        """Convert `value` of tir dtype `source` to `target` (lanes must match or source is scalar)."""
        b = self.builder
        src, dst = dtype_of(source), dtype_of(target)
        if dst.lanes != src.lanes:
            value = self.cast(value, src.element, dst.element)
            return splat(b, value, dst.lanes)
        to_type = value_type(target)
        if src.element == dst.element:
            return value
        if dst.is_bool:
            zero = ir.Constant(value.type, None)
            return b.fcmp_unordered("!=", value, zero) if src.is_float else b.icmp_unsigned("!=", value, zero)
        if src.is_float and dst.is_float:
            return b.fpext(value, to_type) if dst.bits > src.bits else b.fptrunc(value, to_type)
        if src.is_float:
            return b.fptosi(value, to_type) if dst.is_signed else b.fptoui(value, to_type)
        if dst.is_float:
            return b.sitofp(value, to_type) if src.is_signed else b.uitofp(value, to_type)
        if src.is_bool:  # i1 in registers, whatever DType.bits says
            return b.zext(value, to_type)
        if dst.bits < src.bits:
            return b.trunc(value, to_type)
        if dst.bits > src.bits:
            return b.sext(value, to_type) if src.is_signed else b.zext(value, to_type)
        return value  # int32 <-> uint32: same bits

    def _match(self, a: ir.Value, b_value: ir.Value, b_dtype: str, a_dtype: str) -> ir.Value:
        """Bring operand b to a's type: tir allows int32 loop vars next to int64 values, scalars next to vectors."""
        if b_value.type == a.type:
            return b_value
        return self.cast(b_value, b_dtype, a_dtype)

    def index_value(self, index: tir.PrimExpr) -> ir.Value:
        """A scalar index as i64 (sign-extended).

        Its integer adds, subtracts and multiplies carry `nsw` (`_int_flags`): an element index that
        overflowed would address memory outside the buffer, which the entry's argument checks and the
        static shapes rule out. It tells LLVM an int32 index does not wrap, so the index of a loop can be
        widened to i64 once instead of sign-extended on every iteration (a `movslq` in each conv step).
        """
        self._index_depth += 1
        try:
            value = self.expr(index)
        finally:
            self._index_depth -= 1
        parsed = dtype_of(index.dtype)
        if value.type == I64:
            return value
        return self.builder.sext(value, I64) if parsed.is_signed else self.builder.zext(value, I64)

    # -- leaves -------------------------------------------------------------------------------

    def visit_IntImm(self, node: tir.IntImm) -> ir.Value:
        return const_of(node.dtype, node.value)

    def visit_FloatImm(self, node: tir.FloatImm) -> ir.Value:
        return const_of(node.dtype, node.value)

    def visit_StringImm(self, node: tir.StringImm) -> ir.Value:
        data = bytearray(node.value.encode() + b"\0")
        text = ir.GlobalVariable(self.module, ir.ArrayType(ir.IntType(8), len(data)),
                                 self.module.get_unique_name("str"))
        text.initializer = ir.Constant(text.type.pointee, data)
        text.global_constant, text.linkage = True, "internal"
        return self.builder.bitcast(text, PTR)

    def visit_Var(self, node: tir.Var) -> ir.Value:
        try:
            return self.vars[node]
        except KeyError:
            raise CompileError(f"cpu_llvm: variable {node.name!r} is used outside the loop or let that binds it") from None

    # -- arithmetic ---------------------------------------------------------------------------

    def _binary(self, node: tir.BinaryOp) -> tuple[ir.Value, ir.Value]:
        a = self.expr(node.a)
        b = self._match(a, self.expr(node.b), node.b.dtype, node.a.dtype)
        return a, b

    def visit_Add(self, node):
        if dtype_of(node.dtype).is_float:
            product, addend = (node.a, node.b) if isinstance(node.a, tir.Mul) else (node.b, node.a)
            if isinstance(product, tir.Mul) and product.dtype == node.dtype == addend.dtype:
                # x * y + z may fuse into one FMA instruction (llvm.fmuladd lets LLVM decide)
                factors = [self.expr(product.a), self.expr(product.b), self.expr(addend)]
                factors[1] = self._match(factors[0], factors[1], product.b.dtype, product.a.dtype)
                return emit_math_call(self.builder, "fmuladd", node.dtype, factors)
        a, b = self._binary(node)
        if dtype_of(node.dtype).is_float:
            return self.builder.fadd(a, b)
        return self.builder.add(a, b, flags=self._int_flags(node))

    def visit_Sub(self, node):
        a, b = self._binary(node)
        if dtype_of(node.dtype).is_float:
            return self.builder.fsub(a, b)
        return self.builder.sub(a, b, flags=self._int_flags(node))

    def visit_Mul(self, node):
        a, b = self._binary(node)
        if dtype_of(node.dtype).is_float:
            return self.builder.fmul(a, b)
        return self.builder.mul(a, b, flags=self._int_flags(node))

    def _int_flags(self, node) -> tuple[str, ...]:
        """`nsw` for signed integer arithmetic of an element index (`index_value`); tensor values wrap."""
        return ("nsw",) if self._index_depth and dtype_of(node.dtype).is_signed else ()

    def visit_Div(self, node):
        a, b = self._binary(node)
        parsed = dtype_of(node.dtype)
        if parsed.is_float:
            return self.builder.fdiv(a, b)
        return self.builder.sdiv(a, b) if parsed.is_signed else self.builder.udiv(a, b)

    def _floor_parts(self, node) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """(b, truncated quotient, remainder, fix-up condition) for signed floor semantics."""
        a, b = self._binary(node)
        builder = self.builder
        quotient, remainder = builder.sdiv(a, b), builder.srem(a, b)
        zero = ir.Constant(a.type, None)
        # the remainder's sign differs from the divisor's: floor is one below the truncation
        needs_fix = builder.and_(builder.icmp_signed("!=", remainder, zero),
                                 builder.icmp_signed("<", builder.xor(remainder, b), zero))
        return b, quotient, remainder, needs_fix

    def _unsigned_division(self, node) -> bool:
        """Signed floor division or modulo of a non-negative value by a positive constant: udiv/urem give
        the same result without floor semantics' sign fix-up, which every index of a tile (p // 14,
        p % 14) repeated and LLVM spent its time taking apart."""
        return _positive_constant(node.b) and tir.non_negative(node.a, self.non_negative_vars)

    def visit_FloorDiv(self, node):
        parsed = dtype_of(node.dtype)
        if parsed.is_float:
            a, b = self._binary(node)
            return emit_math_call(self.builder, "floor", node.dtype, [self.builder.fdiv(a, b)])
        if not parsed.is_signed or self._unsigned_division(node):
            a, b = self._binary(node)
            return self.builder.udiv(a, b)
        _, quotient, _, needs_fix = self._floor_parts(node)
        return self.builder.sub(quotient, self.builder.zext(needs_fix, quotient.type))

    def visit_FloorMod(self, node):
        parsed = dtype_of(node.dtype)
        if parsed.is_float:
            a, b = self._binary(node)
            floored = emit_math_call(self.builder, "floor", node.dtype, [self.builder.fdiv(a, b)])
            return self.builder.fsub(a, self.builder.fmul(floored, b))
        if not parsed.is_signed or self._unsigned_division(node):
            a, b = self._binary(node)
            return self.builder.urem(a, b)
        b, _, remainder, needs_fix = self._floor_parts(node)
        return self.builder.select(needs_fix, self.builder.add(remainder, b), remainder)

    def visit_Min(self, node):
        a, b = self._binary(node)
        return emit_math_call(self.builder, "min", node.dtype, [a, b])

    def visit_Max(self, node):
        a, b = self._binary(node)
        return emit_math_call(self.builder, "max", node.dtype, [a, b])

    # -- bit operations (integers; tir keeps shift amounts in [0, bits)) --------------------------

    def visit_BitAnd(self, node):
        return self.builder.and_(*self._binary(node))

    def visit_BitOr(self, node):
        return self.builder.or_(*self._binary(node))

    def visit_BitXor(self, node):
        return self.builder.xor(*self._binary(node))

    def visit_ShiftLeft(self, node):
        return self.builder.shl(*self._binary(node))

    def visit_ShiftRight(self, node):
        a, b = self._binary(node)
        return self.builder.ashr(a, b) if dtype_of(node.dtype).is_signed else self.builder.lshr(a, b)

    def visit_Reinterpret(self, node):
        """The same bits as another type; bool is an i1 in registers and 0/1 in a byte in memory."""
        value = self.expr(node.value)
        source, target = dtype_of(node.value.dtype), dtype_of(node.dtype)
        if source.is_bool:
            value = self.builder.zext(value, memory_type(node.value.dtype))
        if target.is_bool:
            return self.builder.icmp_unsigned("!=", value, ir.Constant(value.type, None))
        return self.builder.bitcast(value, value_type(node.dtype))

    # -- comparisons and logic ----------------------------------------------------------------

    def _compare(self, node, symbol: str):
        a, b = self._binary(node)
        operand = dtype_of(node.a.dtype)
        if operand.is_float:
            if symbol == "!=":
                return self.builder.fcmp_unordered(symbol, a, b)
            return self.builder.fcmp_ordered(symbol, a, b)
        if operand.is_signed:
            return self.builder.icmp_signed(symbol, a, b)
        return self.builder.icmp_unsigned(symbol, a, b)

    def visit_EQ(self, node): return self._compare(node, "==")
    def visit_NE(self, node): return self._compare(node, "!=")
    def visit_LT(self, node): return self._compare(node, "<")
    def visit_LE(self, node): return self._compare(node, "<=")
    def visit_GT(self, node): return self._compare(node, ">")
    def visit_GE(self, node): return self._compare(node, ">=")

    def _as_bool(self, node: tir.PrimExpr) -> ir.Value:
        value = self.expr(node)
        if element_type(value.type) == I1:
            return value
        return self.cast(value, node.dtype, with_lanes("bool", node.lanes))

    def visit_And(self, node):
        return self.builder.and_(self._as_bool(node.a), self._as_bool(node.b))

    def visit_Or(self, node):
        return self.builder.or_(self._as_bool(node.a), self._as_bool(node.b))

    def visit_Not(self, node):
        return self.builder.not_(self._as_bool(node.a))

    def visit_Select(self, node):
        condition = self._as_bool(node.condition)
        true_value = self.expr(node.true_value)
        false_value = self._match(true_value, self.expr(node.false_value), node.false_value.dtype,
                                  node.true_value.dtype)
        if lanes_of(condition.type) not in (1, lanes_of(true_value.type)):
            raise CompileError(f"cpu_llvm: Select condition has {lanes_of(condition.type)} lanes but values have "
                               f"{lanes_of(true_value.type)}: {node}")
        return self.builder.select(condition, true_value, false_value)

    def visit_Cast(self, node):
        return self.cast(self.expr(node.value), node.value.dtype, node.dtype)

    # -- vectors ------------------------------------------------------------------------------

    def visit_Ramp(self, node):
        base = self.expr(node.base)
        stride = self._match(base, self.expr(node.stride), node.stride.dtype, node.base.dtype)
        lanes = node.lanes_count
        offsets = ir.Constant(ir.VectorType(base.type, lanes), [ir.Constant(base.type, i) for i in range(lanes)])
        return self.builder.add(splat(self.builder, base, lanes),
                                self.builder.mul(splat(self.builder, stride, lanes), offsets))

    def visit_Broadcast(self, node):
        return splat(self.builder, self.expr(node.value), node.lanes_count)

    # -- memory -------------------------------------------------------------------------------

    def buffer_pointer(self, buffer: tir.Buffer) -> ir.Value:
        try:
            return self.buffers[buffer]
        except KeyError:
            raise CompileError(f"cpu_llvm: buffer {buffer.name!r} is neither a parameter nor allocated here") from None

    def element_pointer(self, buffer: tir.Buffer, index: ir.Value) -> ir.Value:
        return self.builder.gep(self.buffer_pointer(buffer), [index], inbounds=True)

    @staticmethod
    def contiguous_base(index: tir.PrimExpr) -> tir.PrimExpr | None:
        """The base of a stride-1 Ramp index (one vector load/store), else None."""
        if isinstance(index, tir.Ramp) and isinstance(index.stride, tir.IntImm) and index.stride.value == 1:
            return index.base
        return None

    def _from_memory(self, value: ir.Value, dtype: str) -> ir.Value:
        if dtype_of(dtype).is_bool:
            return self.builder.icmp_unsigned("!=", value, ir.Constant(value.type, None))
        return value

    def to_memory(self, value: ir.Value, dtype: str) -> ir.Value:
        if dtype_of(dtype).is_bool:
            return self.builder.zext(value, memory_type(dtype))
        return value

    def _masked_intrinsic(self, kind: str, vector_type: ir.Type) -> ir.Function:
        element = vector_type.element
        name_suffix = getattr(element, "intrinsic_name", None) if not isinstance(element, ir.IntType) else None
        suffix = f"v{vector_type.count}{name_suffix or f'i{element.width}'}.p0"
        mask_type = ir.VectorType(I1, vector_type.count)
        pointer_type = vector_type.as_pointer()
        if kind == "load":
            return declare(self.module, f"llvm.masked.load.{suffix}", vector_type,
                           [pointer_type, I32, mask_type, vector_type])
        return declare(self.module, f"llvm.masked.store.{suffix}", ir.VoidType(),
                       [vector_type, pointer_type, I32, mask_type])

    def visit_Load(self, node: tir.Load):
        buffer = node.buffer
        lanes = node.index.lanes
        element_bytes = max(1, dtype_of(buffer.dtype).bits // 8)
        base = self.contiguous_base(node.index)
        if lanes > 1 and base is not None and node.predicate is not None and not dtype_of(buffer.dtype).is_bool:
            # a padded row: a plain load of the lanes on, and no mask emitted (lane_masks.py)
            ranged = split_predicate(node.predicate, lanes)
            if ranged is not None:
                return self._range_load(buffer, base, lanes, *ranged, element_bytes)
        mask = self._as_bool(node.predicate) if node.predicate is not None else None
        builder = self.builder
        if lanes == 1:
            if mask is None:
                return self._from_memory(builder.load(self.element_pointer(buffer, self.index_value(node.index)),
                                                      align=element_bytes), buffer.dtype)
            # read a safe element (0) for masked-off scalars instead of branching
            index = builder.select(mask, self.index_value(node.index), I64(0))
            loaded = self._from_memory(builder.load(self.element_pointer(buffer, index), align=element_bytes),
                                       buffer.dtype)
            return builder.select(mask, loaded, ir.Constant(loaded.type, None))
        vector_memory_type = memory_type(with_lanes(buffer.dtype, lanes))
        if base is not None:
            pointer = builder.bitcast(self.element_pointer(buffer, self.index_value(base)),
                                      vector_memory_type.as_pointer())
            if mask is None:
                return self._from_memory(builder.load(pointer, align=element_bytes), buffer.dtype)
            if lanes_of(mask.type) == 1:
                mask = splat(builder, mask, lanes)
            loaded = self._masked_load(pointer, buffer.dtype, lanes, mask, element_bytes)
            return self._from_memory(loaded, buffer.dtype)
        strided = self._strided_load(node, mask, lanes, element_bytes)
        if strided is not None:
            return strided
        return self._gather(node, mask, lanes, element_bytes)

    def _range_load(self, buffer: tir.Buffer, base: tir.PrimExpr, lanes: int, shared: list, first: int, stop: int,
                    element_bytes: int) -> ir.Value:
        """A contiguous load whose lanes [first, stop) are on when every condition of `shared` holds, and
        the others are zero (lane_masks.split_predicate): the range is one plain load, from a zeroed stack
        slot when `shared` fails (a select of the address, no branch), shuffled into place."""
        builder = self.builder
        vector_type = value_type(with_lanes(buffer.dtype, lanes))
        count = stop - first
        if count == 0:
            return ir.Constant(vector_type, None)
        part_type = memory_type(with_lanes(buffer.dtype, count))
        start = self.index_value(base)
        if first:
            start = builder.add(start, I64(first))
        pointer = builder.bitcast(self.element_pointer(buffer, start), part_type.as_pointer())
        if shared:
            condition = self._as_bool(shared[0])
            for term in shared[1:]:
                condition = builder.and_(condition, self._as_bool(term))
            pointer = builder.select(condition, pointer, self._zero_slot(part_type))
        part = builder.load(pointer, align=element_bytes)
        if count == lanes:
            return part
        if count == 1:
            part = builder.insert_element(ir.Constant(ir.VectorType(part_type, 1), None), part, I32(0))
        part_vector = part.type
        picks = [lane - first if first <= lane < stop else count for lane in range(lanes)]
        return builder.shuffle_vector(part, ir.Constant(part_vector, None),
                                      ir.Constant(ir.VectorType(I32, lanes), picks))

    def _zero_slot(self, llvm_type: ir.Type) -> ir.Value:
        """A stack slot of `llvm_type` holding zeros, made once per function at its entry."""
        function = self.builder.function
        key = (id(function), str(llvm_type))
        slot = self._zero_slots.get(key)
        if slot is None or slot[0] is not function:
            address = alloca_in_entry(self.builder, llvm_type, name="zeros")
            with self.builder.goto_block(function.entry_basic_block):
                self.builder.position_after(address)
                self.builder.store(ir.Constant(llvm_type, None), address)
            slot = self._zero_slots[key] = (function, address)
        return slot[1]

    def _masked_load(self, pointer: ir.Value, dtype: str, lanes: int, mask: ir.Value, element_bytes: int) -> ir.Value:
        """llvm.masked.load of `lanes` elements (masked-off lanes are zero). A lane count that is not a
        power of two is loaded as the next power of two with the extra lanes masked off (they read
        nothing): x86 takes only power-of-two masked loads as legal and scalarizes the others into a
        branch per lane."""
        builder = self.builder
        width = 1 << (lanes - 1).bit_length()
        vector_type = memory_type(with_lanes(dtype, lanes))
        if width == lanes:
            return builder.call(self._masked_intrinsic("load", vector_type),
                                [pointer, I32(element_bytes), mask, ir.Constant(vector_type, None)])
        wide_type = memory_type(with_lanes(dtype, width))
        # widened as 32-bit lanes: a shuffle of an odd-width i1 vector becomes one mask-register
        # shift per lane on AVX-512
        as_int = builder.sext(mask, ir.VectorType(I32, lanes))
        zeros = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        wide_int = builder.shuffle_vector(as_int, zeros, ir.Constant(ir.VectorType(I32, width),
                                                                     [*range(lanes), *([lanes] * (width - lanes))]))
        wide_mask = builder.icmp_signed("!=", wide_int, ir.Constant(ir.VectorType(I32, width), [0] * width))
        wide = builder.call(self._masked_intrinsic("load", wide_type),
                            [builder.bitcast(pointer, wide_type.as_pointer()), I32(element_bytes), wide_mask,
                             ir.Constant(wide_type, None)])
        return builder.shuffle_vector(wide, ir.Constant(wide_type, ir.Undefined),
                                      ir.Constant(ir.VectorType(I32, lanes), list(range(lanes))))

    def _strided_load(self, node: tir.Load, mask, lanes: int, element_bytes: int) -> ir.Value | None:
        """A Ramp index of constant stride 2..STRIDED_LOAD_MAX as one contiguous vector load of the
        (lanes - 1) * stride + 1 elements it spans, then a shuffle of every stride-th lane (a strided
        conv or pool reads x * 2 + rx): a gather would cost one load per lane. The span is exactly
        what the lanes cover, so nothing outside the ramp's own range is read; under a mask, only
        the lanes the ramp reads are enabled. None: not such a ramp."""
        index = node.index
        if not (isinstance(index, tir.Ramp) and isinstance(index.stride, tir.IntImm)
                and 2 <= index.stride.value <= STRIDED_LOAD_MAX and index.base.lanes == 1) \
                or dtype_of(node.buffer.dtype).is_bool:
            return None
        stride = index.stride.value
        span = (lanes - 1) * stride + 1
        builder = self.builder
        wide_type = memory_type(with_lanes(node.buffer.dtype, span))
        pointer = builder.bitcast(self.element_pointer(node.buffer, self.index_value(index.base)),
                                  wide_type.as_pointer())
        if mask is None:
            wide = builder.load(pointer, align=element_bytes)
        else:
            if lanes_of(mask.type) == 1:
                mask = splat(builder, mask, lanes)
            # wide lane j * stride takes lane j's mask; the lanes between are not read
            # (shuffled as 32-bit lanes, see _masked_load)
            as_int = builder.sext(mask, ir.VectorType(I32, lanes))
            zeros = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
            picks = [j // stride if j % stride == 0 else lanes + j // stride for j in range(span)]
            wide_int = builder.shuffle_vector(as_int, zeros, ir.Constant(ir.VectorType(I32, span), picks))
            wide_mask = builder.icmp_signed("!=", wide_int, ir.Constant(ir.VectorType(I32, span), [0] * span))
            wide = self._masked_load(pointer, node.buffer.dtype, span, wide_mask, element_bytes)
        every = ir.Constant(ir.VectorType(I32, lanes), [j * stride for j in range(lanes)])
        return builder.shuffle_vector(wide, ir.Constant(wide_type, ir.Undefined), every)

    def _gather(self, node: tir.Load, mask, lanes: int, element_bytes: int) -> ir.Value:
        builder = self.builder
        indices = self.expr(node.index)
        result = ir.Constant(value_type(with_lanes(node.buffer.dtype, lanes)), None)
        for lane in range(lanes):
            index = builder.extract_element(indices, I32(lane))
            lane_mask = None
            if mask is not None:
                lane_mask = mask if lanes_of(mask.type) == 1 else builder.extract_element(mask, I32(lane))
                index = builder.select(lane_mask, index, ir.Constant(index.type, 0))
            index = builder.sext(index, I64) if index.type != I64 else index
            value = self._from_memory(builder.load(self.element_pointer(node.buffer, index), align=element_bytes),
                                      node.buffer.dtype)
            if lane_mask is not None:
                value = builder.select(lane_mask, value, ir.Constant(value.type, None))
            result = builder.insert_element(result, value, I32(lane))
        return result

    def visit_BufferPointer(self, node: tir.BufferPointer):
        return self.builder.bitcast(self.element_pointer(node.buffer, self.index_value(node.index)), PTR)

    # -- calls --------------------------------------------------------------------------------

    def visit_Call(self, node: tir.Call):
        args = [self.expr(a) for a in node.args]
        if node.name in MATH_NAMES:
            args = [self.cast(value, arg.dtype, node.dtype) for value, arg in zip(args, node.args)]
            return emit_math_call(self.builder, node.name, node.dtype, args)
        return self.call_intrinsic(self.builder, node, args)


def _positive_constant(node: tir.PrimExpr) -> bool:
    if isinstance(node, tir.Broadcast):
        node = node.value
    return isinstance(node, tir.IntImm) and node.value > 0
