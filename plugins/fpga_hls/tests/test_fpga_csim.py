"""test_fpga_csim.py: the C-simulation device: builds, numerics against numpy, cache, streams, errors."""
from __future__ import annotations

import subprocess
import time

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import RuntimeLaunchError


def test_target_is_available_through_csimulation(capsys):
    from tensorkiln.cli import main
    target = tk.target("fpga_hls")
    assert target.spec.is_available and target.options["device"] == "csim"
    assert "C-simulation" in target.spec.loader.describe_device(target)
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "fpga_hls" in line)
    assert "available" in row and "not available" not in row
    assert "fpga_hls: runs through bit-accurate C-simulation" in out


def test_pipelined_matmul_matches_numpy_and_is_cached(matmul):
    a, b, c = matmul(48, 40, 24)
    s = te.create_schedule(c.op)
    s[c].pipeline(s[c].op.reduce_axis[0], 1)
    f = tk.build(s, [a, b, c], target="fpga_hls", name="mm")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((48, 24), dtype=np.float32), rng.standard_normal((24, 40), dtype=np.float32)
    out = np.zeros((48, 40), np.float32)
    f(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)
    library = f.loaded.library_path
    stamp = library.stat().st_mtime_ns
    start = time.perf_counter()
    again = tk.build(s, [a, b, c], target="fpga_hls", name="mm")   # same source: no g++ run
    assert time.perf_counter() - start < 1.0
    assert again.loaded.library_path == library
    assert library.stat().st_mtime_ns == stamp
    out2 = np.zeros_like(out)
    again(x, y, out2)
    np.testing.assert_array_equal(out, out2)
    assert list(library.parent.glob("pch-*/tk_hls.h.gch"))   # the precompiled header


def _two_stages(n, read=lambda b, i: b[i]):
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((n,), lambda i: read(b, i) + 1.0, name="C")
    return a, b, c


def test_dataflow_stages_stream_through_a_shallow_fifo():
    a, b, c = _two_stages(512)
    s = te.create_schedule(c.op)
    s[b].stream(2)
    s.dataflow()
    s[b].pipeline(b.op.axis[0])
    s[c].pipeline(c.op.axis[0])
    f = tk.build(s, [a, c], target="fpga_hls", name="df")
    x = np.random.default_rng(1).standard_normal(512).astype(np.float32)
    out = np.zeros(512, np.float32)
    f(x, out)
    np.testing.assert_array_equal(out, x * 2 + 1)


def test_stream_read_out_of_order_is_an_error():
    n = 64
    a, b, c = _two_stages(n, read=lambda b, i: b[n - 1 - i])
    s = te.create_schedule(c.op)
    s[b].stream(4)
    s.dataflow()
    f = tk.build(s, [a, c], target="fpga_hls", name="reversed")
    with pytest.raises(RuntimeLaunchError, match=r"stream B: element 63 read out of order \(expected 0\)"):
        f(np.zeros(n, np.float32), np.zeros(n, np.float32))


def test_a_full_stream_outside_dataflow_is_an_error():
    a, b, c = _two_stages(64)
    s = te.create_schedule(c.op)
    s[b].stream(4)
    f = tk.build(s, [a, c], target="fpga_hls", name="sequential")
    with pytest.raises(RuntimeLaunchError, match=r"write to a full stream B \(depth 4, holding 4\) outside a dataflow"):
        f(np.zeros(64, np.float32), np.zeros(64, np.float32))



def test_a_bound_kernel_still_raises_the_simulation_error():
    """The graph executor binds each kernel once (`bind`): the bound call must raise too."""
    a, b, c = _two_stages(64)
    s = te.create_schedule(c.op)
    s[b].stream(4)
    lib = tk.build(s, [a, c], target="fpga_hls", name="sequential_bound")
    kernel = tk.target("fpga_hls").spec.loader.load(lib.artifact, tk.target("fpga_hls")).get_function("sequential_bound")
    call = kernel.bind(np.zeros(64, np.float32), np.zeros(64, np.float32))
    with pytest.raises(RuntimeLaunchError, match=r"write to a full stream B"):
        call()


_DEADLOCK = """
#include "tk_hls.h"
#include <cstdio>
int main() {
    tk::stream<int> s("s", 2);
    tk::stream<int> never("never", 2);
    try {
        tk::dataflow region;
        region.spawn([&]() { for (int i = 0; i < 3; ++i) s.write(i); });
        region.spawn([&]() { int total = 0; for (int i = 0; i < 3; ++i) total += s.read(); never.read(); });
        region.join();
    } catch (const tk::stream_error& e) { std::printf("%s\\n", e.what()); return 0; }
    return 1;
}
"""


def test_stream_class_reports_a_dataflow_deadlock(tmp_path):
    from tensorkiln_fpga_hls.csim import CXX_FLAGS, ap_types_dir, precompiled_headers
    source = tmp_path / "deadlock.cpp"
    source.write_text(_DEADLOCK)
    headers = precompiled_headers()
    subprocess.run(["g++", *CXX_FLAGS, "-I", str(headers), "-I", str(ap_types_dir()), "-o",
                    str(tmp_path / "deadlock"), str(source)], check=True)
    done = subprocess.run([str(tmp_path / "deadlock")], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "read from an empty stream never (depth 2, holding 0): every dataflow stage waits (deadlock)" in done.stdout


def test_wrong_arguments_are_refused_before_simulation(matmul):
    a, b, c = matmul(8)
    f = tk.build(te.create_schedule(c.op), [a, b, c], target="fpga_hls", name="small")
    with pytest.raises(Exception, match="shape"):
        f(np.zeros((8, 8), np.float32), np.zeros((8, 9), np.float32), np.zeros((8, 8), np.float32))
