"""Index arithmetic cpu_llvm emits: floor division and modulo of an index known to be non-negative by a
positive constant are unsigned (udiv/urem), anything else keeps floor semantics; kernel bodies are
inlined into their entries before optimisation."""
from __future__ import annotations

import re

import numpy as np

import tensorkiln as tk
from tensorkiln import te


def _unoptimized(module) -> str:
    return module.artifact.sources["llvm-unoptimized"]


def test_floor_division_of_a_loop_index_is_unsigned_and_exact():
    # rows[i // 7] * cols[i % 7]: i runs from 0, so both are plain unsigned operations
    rows, cols = te.placeholder((9,), name="rows"), te.placeholder((7,), name="cols")
    b = te.compute((63,), lambda i: rows[i // 7] * cols[i % 7], name="b")
    module = tk.build(te.create_schedule(b.op), [rows, cols, b], target="llvm", name="outer")
    kernel = _unoptimized(module).split("define")
    body = next(part for part in kernel if part.startswith(' internal void @"outer.impl"'))
    assert re.search(r"\budiv\b", body) and re.search(r"\burem\b", body)
    assert not re.search(r"\bsdiv\b|\bsrem\b", body)
    r = np.random.default_rng(0).standard_normal(9).astype("float32")
    c = np.random.default_rng(1).standard_normal(7).astype("float32")
    out = np.empty(63, "float32")
    module(r, c, out)
    np.testing.assert_array_equal(out, np.outer(r, c).reshape(-1))


def test_floor_division_of_a_possibly_negative_index_keeps_floor_semantics():
    # (i - 5) // 3 and (i - 5) % 3 are negative for i < 5: floor, not truncation
    a = te.placeholder((16,), name="a")
    b = te.compute((16,), lambda i: a[(i - 5) // 3 + 2] + a[(i - 5) % 3], name="b")
    module = tk.build(te.create_schedule(b.op), [a, b], target="llvm")
    data = np.arange(16, dtype="float32")
    out = np.empty(16, "float32")
    module(data, out)
    i = np.arange(16)
    np.testing.assert_array_equal(out, data[(i - 5) // 3 + 2] + data[(i - 5) % 3])


def test_a_kernel_body_and_its_parallel_loop_are_inlined_before_optimisation():
    a = te.placeholder((64, 64), name="a")
    b = te.compute((64, 64), lambda i, j: a[i, j] + 1.0, name="b")
    s = te.create_schedule(b.op)
    s[b].parallel(b.op.axis[0])
    module = tk.build(s, [a, b], target="llvm", name="plus_one")
    unoptimized, optimized = _unoptimized(module), module.artifact.source
    assert re.search(r'define internal void @"plus_one\.impl"\(.*\) alwaysinline', unoptimized)
    assert re.search(r'define internal void @"plus_one\.impl\.parallel0\.body"\(.*\) alwaysinline', unoptimized)
    # what remains: the entry (holding the body) and the outlined loop the thread pool calls
    defined = [name.strip('"') for name in re.findall(r'^define [^@]*@("[^"]+"|[^ (]+)\(', optimized, flags=re.M)]
    assert "plus_one.impl" not in defined and "plus_one.impl.parallel0.body" not in defined
    assert "plus_one" in defined and "plus_one.impl.parallel0" in defined
    data = np.random.default_rng(1).standard_normal((64, 64)).astype("float32")
    out = np.empty((64, 64), "float32")
    module(data, out)
    np.testing.assert_array_equal(out, data + 1.0)
