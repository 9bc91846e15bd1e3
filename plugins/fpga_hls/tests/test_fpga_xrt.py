"""test_fpga_xrt.py: the board device through pyxrt (a fake with XRT's call surface), and the Vitis project."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import TargetError


@pytest.fixture
def fake_pyxrt(monkeypatch):
    import fake_pyxrt
    fake_pyxrt.CALLS.clear()
    monkeypatch.setitem(sys.modules, "pyxrt", fake_pyxrt)
    return fake_pyxrt


def _gemm(matmul):
    a, b, c = matmul(32, 16, 24)
    s = te.create_schedule(c.op)
    s[c].pipeline(s[c].op.reduce_axis[0])
    return s, [a, b, c]


def test_missing_xclbin_writes_the_vitis_project(matmul, tmp_path, fake_pyxrt):
    s, args = _gemm(matmul)
    xclbin = tmp_path / "build" / "kernels.xclbin"
    with pytest.raises(TargetError, match=r"does not exist; the Vitis project is written to .*: run `make -C"):
        tk.build(s, args, target=f"fpga_hls -device=xrt -xclbin={xclbin}", name="gemm")
    folder = xclbin.parent
    makefile = (folder / "Makefile").read_text()
    assert "KERNELS := gemm" in makefile and "v++ -c -t $(TARGET) --platform $(PLATFORM) -k $*" in makefile
    assert "v++ -l -t $(TARGET)" in makefile and "CLOCK_HZ ?= 300000000" in makefile
    tcl = (folder / "csynth_gemm.tcl").read_text()
    assert "set_top gemm" in tcl and "create_clock -period 3.333" in tcl and "csynth_design" in tcl
    assert "#pragma HLS PIPELINE II=1" in (folder / "kernels.cpp").read_text()
    assert not (folder / "kernels.xclbin").exists()
    assert (folder / "include" / "tk_hls.h").exists() and (folder / "include" / "tk_stream.h").exists()


def test_board_run_through_pyxrt_matches_numpy(matmul, tmp_path, fake_pyxrt):
    from tensorkiln_fpga_hls.csim import build_library, library_source
    s, args = _gemm(matmul)
    target = tk.target(f"fpga_hls -device=xrt -xclbin={tmp_path / 'kernels.xclbin'}")
    func = tk.lower(s, args, name="gemm")
    artifact = target.spec.emitter.emit([func], target)
    # stand-in for `make`: the fake's xclbin is the C-simulation library of the same kernels
    (tmp_path / "kernels.xclbin").write_bytes(build_library(library_source(artifact)).read_bytes())
    f = tk.build(s, args, target=target, name="gemm")
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((32, 24), dtype=np.float32), rng.standard_normal((24, 16), dtype=np.float32)
    out = np.zeros((32, 16), np.float32)
    f(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)
    kinds = [call[0] for call in fake_pyxrt.CALLS]
    assert kinds[:3] == ["device", "load_xclbin", "kernel"] and kinds.count("bo") == 3 and "run" in kinds
    assert ("sync", "XCL_BO_SYNC_BO_FROM_DEVICE") in fake_pyxrt.CALLS


def _board_and_csim(s, args, tmp_path, options, name):
    """The kernel on the board (fake pyxrt running the kernel's own top function on device words)
    and in C-simulation (the float bridge), from one emitted artifact."""
    from tensorkiln_fpga_hls.csim import build_library, library_source
    board = tk.target(f"fpga_hls -device=xrt -xclbin={tmp_path / 'kernels.xclbin'} {options}")
    artifact = board.spec.emitter.emit([tk.lower(s, args, name=name)], board)
    (tmp_path / "kernels.xclbin").write_bytes(build_library(library_source(artifact)).read_bytes())
    return tk.build(s, args, target=board, name=name), tk.build(s, args, target=f"fpga_hls {options}", name=name)


@pytest.mark.parametrize("a_type, b_type, c_type", [
    ("ap_fixed<16,6,AP_RND_CONV,AP_SAT>", "ap_fixed<16,6,AP_RND_CONV,AP_SAT>", "ap_fixed<18,8,AP_RND,AP_SAT>"),
    ("ap_fixed<12,4,AP_TRN,AP_WRAP>", "ap_ufixed<7,2,AP_RND_ZERO,AP_SAT_SYM>", "ap_fixed<12,4,AP_TRN,AP_WRAP>"),
], ids=["fixed16-fixed18", "fixed12-ufixed7"])
def test_board_converts_fixed_point_buffers_as_the_csim_bridge(matmul, tmp_path, fake_pyxrt, a_type, b_type, c_type):
    """Inputs go to the device as the types' words (host quantisation), outputs come back from words:
    bit-identical to C-simulation, whose bridge converts inside C++, and to the numpy quantiser."""
    from tensorkiln_fpga_hls.types import HLSType, quantize
    s, args = _gemm(matmul)
    types = f"-tensor_types=A={a_type};B={b_type};C={c_type}"
    board, csim = _board_and_csim(s, args, tmp_path, types, "fixed_gemm")
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal((32, 24)) * 4).astype(np.float32), rng.standard_normal((24, 16)).astype(np.float32)
    on_board, simulated = np.zeros((32, 16), np.float32), np.zeros((32, 16), np.float32)
    board(x, y, on_board)
    csim(x, y, simulated)
    np.testing.assert_array_equal(on_board, simulated)
    type_of = {"A": HLSType.parse(a_type), "B": HLSType.parse(b_type), "C": HLSType.parse(c_type)}
    expected = quantize(quantize(x, type_of["A"]) @ quantize(y, type_of["B"]), type_of["C"])
    np.testing.assert_array_equal(on_board, expected.astype(np.float32))
    sizes = [call[1] for call in fake_pyxrt.CALLS if call[0] == "bo"]
    words = [type_of[n].width for n in "ABC"]
    assert sizes == [count * next(b for b in (1, 2, 4, 8) if w <= 8 * b)
                     for count, w in zip((32 * 24, 24 * 16, 32 * 16), words)]   # packed, not float32


def test_board_int8_tensors_as_ap_int(matmul, tmp_path, fake_pyxrt):
    a, b, c = matmul(8, dtype="int8")
    s = te.create_schedule(c.op)
    board, _ = _board_and_csim(s, [a, b, c], tmp_path, "-tensor_types=A=ap_int<8>;B=ap_int<8>;C=ap_int<20>", "int_mm")
    rng = np.random.default_rng(8)
    x, y = (rng.integers(-128, 128, (8, 8)).astype(np.int8) for _ in range(2))
    out = np.zeros((8, 8), np.int32)
    board(x, y, out)
    np.testing.assert_array_equal(out, x.astype(np.int32) @ y.astype(np.int32))   # |sum| < 2**19: fits ap_int<20>


def test_bits_round_trip_and_layout():
    from tensorkiln_fpga_hls.types import HLSType, from_bits, to_bits
    t = HLSType.parse("ap_fixed<16,6>")
    words = to_bits(np.array([-1.25, 0.5, 31.9995]), t)
    assert words.dtype == np.int16 and list(words) == [-1280, 512, 32767]   # value * 2**10, truncated
    np.testing.assert_array_equal(from_bits(words, t), [-1.25, 0.5, 32767 / 1024])
    u = HLSType.parse("ap_uint<4>")
    assert to_bits(np.array([17, -1]), u).dtype == np.uint8 and list(to_bits(np.array([17, -1]), u)) == [1, 15]
    s = HLSType.parse("ap_int<5>")
    assert list(from_bits(np.array([0b11111, 0b01111, -1], np.int8), s)) == [-1, 15, -1]   # sign from bit 4
