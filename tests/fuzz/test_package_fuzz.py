"""Mutated model packages: every outcome is an ArtifactError (or a package that still runs and
gives the original outputs), never another exception or a crash.

Mutations (hypothesis): flip bytes anywhere in the file, truncate it, or rewrite one entry of
the zip (random bytes, an empty entry, a size-changed entry) with the content hash recomputed,
as an attacker would. Kernel loading runs in this process: check_elf must stop garbage before
the linker sees it. CI runs a modest number of examples; TK_FUZZ_CASES raises it.
"""
from __future__ import annotations

import io
import os
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.runtime import package

EXAMPLES = int(os.environ.get("TK_FUZZ_CASES", "60"))
X = np.linspace(-1, 1, 2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    x = graph.var("x", shape=(2, 3, 4, 4))
    w = graph.const(np.linspace(-1, 1, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3))
    lib = tk.compile(graph.Module.from_expr(graph.nn.relu(graph.nn.conv2d(x, w, padding=1))), target="cpu_llvm")
    path = tmp_path_factory.mktemp("pkg") / "model.tkpkg"
    lib.export(path)
    return path.read_bytes(), lib(X)


def _outcome(data: bytes, expected, tmp_path) -> None:
    path = tmp_path / "mutated.tkpkg"
    path.write_bytes(data)
    try:
        loaded = tk.runtime.load(path)
        got = loaded(X)
    except TensorkilnError:
        return
    np.testing.assert_allclose(got, expected)   # a mutation that loads must not change the answer


def _rewrite(data: bytes, index: int, content: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    names = sorted(n for n in entries if n != package.HASH_ENTRY)
    entries[names[index % len(names)]] = content
    entries.pop(package.HASH_ENTRY)
    entries[package.HASH_ENTRY] = package._content_hash(entries).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in entries.items():
            archive.writestr(name, value)
    return buffer.getvalue()


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=4))
def test_flipped_bytes(original, tmp_path, flips):
    data = bytearray(original[0])
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    _outcome(bytes(data), original[1], tmp_path)


@FUZZ
@given(keep=st.floats(0, 1, exclude_max=True))
def test_truncated(original, tmp_path, keep):
    _outcome(original[0][:int(keep * len(original[0]))], original[1], tmp_path)


@FUZZ
@given(index=st.integers(0, 50), content=st.one_of(st.binary(max_size=2048), st.just(b""),
                                                     st.binary(min_size=4, max_size=64).map(lambda b: b"\x7fELF" + b)))
def test_rewritten_entry_with_a_recomputed_hash(original, tmp_path, index, content):
    _outcome(_rewrite(original[0], index, content), original[1], tmp_path)
