"""cgutils.py: Small llvmlite helpers: dtype -> LLVM type, loops, guards, loop metadata, entry-block allocas.

In the spirit of numba's `cgutils`: code generation reads as nested `with` blocks::

    with for_range(builder, start, stop) as i:
        ...
    with if_then(builder, condition):
        ...
"""
from __future__ import annotations

import contextlib
import itertools

import llvmlite.ir as ir

from tensorkiln.ir.dtypes import dtype_of

__all__ = ["I1", "I8", "I32", "I64", "VOID", "PTR", "scalar_type", "value_type", "memory_type", "const_of", "lanes_of", "element_type", "splat", "splat_constant", "undef_vector",
           "for_range", "if_then", "loop_metadata", "alloca_in_entry", "declare", "reused_heap_block", "run_parallel",
           "team_size", "count_done", "wait_until_done"]

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()
PTR = I8.as_pointer()  # LLVM >= 17 pointers are opaque: one `ptr` type for all

_FLOATS = {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}


def scalar_type(dtype: str, in_memory: bool = False) -> ir.Type:
    """LLVM type of one element: bool is i1 in registers and i8 in memory (numpy's bool_)."""
    parsed = dtype_of(dtype)
    if parsed.kind == "handle":
        return PTR
    if parsed.kind == "bool":
        return I8 if in_memory else I1
    if parsed.kind == "float":
        return _FLOATS[parsed.bits]
    if parsed.kind == "bfloat":
        from .lowp import BFLOAT   # bfloat16: 16-bit storage, float32 arithmetic (lowp.py)
        return BFLOAT
    return ir.IntType(parsed.bits)


def value_type(dtype: str) -> ir.Type:
    """LLVM type of a register value: "float32x8" -> <8 x float>."""
    element = scalar_type(dtype)
    lanes = dtype_of(dtype).lanes
    return element if lanes == 1 else ir.VectorType(element, lanes)


def memory_type(dtype: str) -> ir.Type:
    element = scalar_type(dtype, in_memory=True)
    lanes = dtype_of(dtype).lanes
    return element if lanes == 1 else ir.VectorType(element, lanes)


def lanes_of(llvm_type: ir.Type) -> int:
    return llvm_type.count if isinstance(llvm_type, ir.VectorType) else 1


def element_type(llvm_type: ir.Type) -> ir.Type:
    return llvm_type.element if isinstance(llvm_type, ir.VectorType) else llvm_type


class _ShortVectorConstant(ir.Constant):
    """A vector constant written in LLVM's short forms (`undef`, `zeroinitializer`, `splat (T v)`)
    rather than element by element: llvmlite writes each lane (32 lanes of a broadcast: about 700
    characters, formatted in Python, then parsed again by LLVM; a quarter of a convolution's IR
    text). `constant` keeps the lanes, which llvmlite's own checks read (shufflevector's mask)."""

    def __init__(self, vector_type: ir.VectorType, lanes, text: str) -> None:
        super().__init__(vector_type, lanes)
        self._text = text

    def _get_reference(self) -> str:
        return self._text


def undef_vector(vector_type: ir.VectorType) -> ir.Constant:
    return _ShortVectorConstant(vector_type, ir.Undefined, "undef")


def splat_constant(value: ir.Constant, lanes: int) -> ir.Constant:
    """A constant vector of `lanes` copies of the scalar constant `value`."""
    vector_type = ir.VectorType(value.type, lanes)
    if isinstance(value.constant, (int, float)) and not isinstance(value.constant, bool) and value.constant == 0 \
            and not (isinstance(value.constant, float) and str(value.constant).startswith("-")):
        return _ShortVectorConstant(vector_type, [value] * lanes, "zeroinitializer")
    if value.constant is ir.Undefined:
        return undef_vector(vector_type)
    return _ShortVectorConstant(vector_type, [value] * lanes, f"splat ({value})")


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """A vector of `lanes` copies of the scalar `value` (a constant vector for constants)."""
    if isinstance(value, ir.Constant):
        return splat_constant(value, lanes)
    vector_type = ir.VectorType(value.type, lanes)
    single = builder.insert_element(undef_vector(vector_type), value, I32(0))
    return builder.shuffle_vector(single, undef_vector(vector_type), splat_constant(I32(0), lanes))


def const_of(dtype: str, value) -> ir.Constant:
    """A scalar constant (use splats for vectors)."""
    parsed = dtype_of(dtype)
    llvm_type = scalar_type(parsed.element)
    if parsed.is_float:
        return ir.Constant(llvm_type, float(value))
    if parsed.is_bool:
        return ir.Constant(I1, int(bool(value)))
    bits = parsed.bits
    return ir.Constant(llvm_type, int(value) & ((1 << bits) - 1))


_loop_ids = itertools.count()


def loop_metadata(module: ir.Module, properties: dict[str, object]) -> ir.values.MDValue:
    """A self-referential loop ID with properties, e.g. {"llvm.loop.vectorize.enable": True}."""
    items = []
    for key, value in properties.items():
        operands = [ir.MetaDataString(module, key)]
        if value is not None:
            operands.append(ir.Constant(I1 if isinstance(value, bool) else I32, int(value)))
        items.append(module.add_metadata(operands))
    loop_id = module.add_metadata([ir.MetaDataString(module, f"tk.loop.{next(_loop_ids)}"), *items])
    # LLVM requires the first operand of a loop ID to be the node itself.
    loop_id.operands = (loop_id, *items)
    return loop_id


@contextlib.contextmanager
def for_range(builder: ir.IRBuilder, start: ir.Value, stop: ir.Value, metadata: dict | None = None,
              name: str = "i"):
    """`for i in range(start, stop)` (step 1); yields i. Skips the body when stop <= start."""
    function = builder.function
    header = builder.block
    body = function.append_basic_block(f"{name}.body")
    done = function.append_basic_block(f"{name}.done")
    builder.cbranch(builder.icmp_signed("<", start, stop), body, done)
    builder.position_at_end(body)
    index = builder.phi(start.type, name=name)
    index.add_incoming(start, header)
    yield index
    following = builder.add(index, ir.Constant(start.type, 1), name=f"{name}.next", flags=["nsw"])
    branch = builder.cbranch(builder.icmp_signed("<", following, stop), body, done)
    index.add_incoming(following, builder.block)
    if metadata:
        branch.set_metadata("llvm.loop", loop_metadata(builder.module, metadata))
    builder.position_at_end(done)


@contextlib.contextmanager
def if_then(builder: ir.IRBuilder, condition: ir.Value, likely: bool | None = None):
    """Code inside the block runs when `condition` (i1) holds."""
    with builder.if_then(condition, likely=likely):
        yield


def alloca_in_entry(builder: ir.IRBuilder, llvm_type: ir.Type, count: int | None = None, name: str = "",
                    align: int = 0) -> ir.Value:
    """An alloca at the top of the function, so loops do not grow the stack."""
    entry = builder.function.entry_basic_block
    with builder.goto_block(entry):
        if entry.instructions:
            builder.position_before(entry.instructions[0])
        slot = builder.alloca(llvm_type, size=None if count is None else ir.Constant(I64, count), name=name)
    if align:
        slot.align = align
    return slot


def declare(module: ir.Module, name: str, return_type: ir.Type, arg_types: list[ir.Type]) -> ir.Function:
    """The function `name` in `module`, declared on first use."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(return_type, arg_types), name)


HEAP_ALIGNMENT = 64


def reused_heap_block(builder: ir.IRBuilder, nbytes: ir.Value, name: str):
    """`nbytes` of 64-byte-aligned heap memory, kept by this allocation site between calls.

    Each site has a block (pointer, size, busy flag) in a module global: a call that sets
    the flag (compare-and-swap, so concurrent calls of the kernel are safe) reuses the
    block, growing it when too small; a call that finds it busy allocates its own. Fresh
    megabytes from malloc cost page faults on every call (measured 5-10% of a 1024^3 GEMM
    whose packed B is allocated per call). Returns (pointer, release): call release()
    where the memory is no longer used.
    """
    module = builder.module
    block_type = ir.LiteralStructType([PTR, I64, I32])
    block = ir.GlobalVariable(module, block_type, module.get_unique_name(f"{name}.block"))
    block.linkage = "internal"
    block.initializer = ir.Constant(block_type, [ir.Constant(PTR, None), I64(0), I32(0)])
    pointer_slot, size_slot, busy = (builder.gep(block, [I32(0), I32(n)], inbounds=True) for n in range(3))
    aligned_alloc = declare(module, "aligned_alloc", PTR, [I64, I64])
    free = declare(module, "free", ir.VoidType(), [PTR])
    owned = builder.extract_value(builder.cmpxchg(busy, I32(0), I32(1), "acquire", "monotonic"), 1)
    result = alloca_in_entry(builder, PTR, name=f"{name}.ptr")
    with builder.if_else(owned, likely=True) as (reuse, own):
        with reuse:
            with builder.if_then(builder.icmp_unsigned("<", builder.load(size_slot), nbytes)):
                builder.call(free, [builder.load(pointer_slot)])
                builder.store(builder.call(aligned_alloc, [I64(HEAP_ALIGNMENT), nbytes]), pointer_slot)
                builder.store(nbytes, size_slot)
            builder.store(builder.load(pointer_slot), result)
        with own:
            builder.store(builder.call(aligned_alloc, [I64(HEAP_ALIGNMENT), nbytes]), result)
    pointer = builder.load(result)

    def release() -> None:
        with builder.if_else(owned, likely=True) as (reuse, own):
            with reuse:
                builder.store_atomic(I32(0), busy, "release", 4)
            with own:
                builder.call(free, [pointer])
    return pointer, release


def run_parallel(builder: ir.IRBuilder, task: ir.Value, closure: ir.Value, threads: ir.Value) -> None:
    """`tk_parallel(task, closure, threads)`: task(closure) on the calling thread and on up to threads - 1
    workers of the pool (thread_pool.c). The task must claim its work from counters in the closure until
    none is left: the pool then returns as soon as the work is done, without waiting for a worker the OS
    has not scheduled yet (such a worker never starts). A region started inside another runs on its
    caller alone, as libgomp runs nested regions."""
    module = builder.module
    tk_parallel = declare(module, "tk_parallel", ir.VoidType(), [PTR, PTR, I32])
    builder.call(tk_parallel, [builder.bitcast(task, PTR), builder.bitcast(closure, PTR), threads])


def team_size(builder: ir.IRBuilder) -> ir.Value:
    """The number of threads of the region the calling thread runs in (1 outside one): `tk_team_size()`."""
    return builder.call(declare(builder.module, "tk_team_size", I32, []), [])


def count_done(builder: ir.IRBuilder, counter: ir.Value) -> None:
    """Atomically add one to the i32 `counter` (release): a piece of shared work is finished."""
    builder.atomic_rmw("add", counter, I32(1), "release")


def wait_until_done(builder: ir.IRBuilder, counter: ir.Value, total: int) -> None:
    """Spin until the i32 `counter` reaches `total` (acquire): every piece, claimed by any thread of the
    region, is finished. Only threads that claimed pieces are waited for, and they are running."""
    function = builder.function
    check = function.append_basic_block("wait.check")
    spin = function.append_basic_block("wait.spin")
    done = function.append_basic_block("wait.done")
    builder.branch(check)
    builder.position_at_end(check)
    value = builder.load_atomic(counter, "acquire", 4)
    builder.cbranch(builder.icmp_signed(">=", value, I32(total)), done, spin)
    builder.position_at_end(spin)
    builder.call(declare(builder.module, "sched_yield", I32, []), [])
    builder.branch(check)
    builder.position_at_end(done)
