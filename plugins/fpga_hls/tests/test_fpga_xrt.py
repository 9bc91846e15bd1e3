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


def test_board_refuses_fixed_point_tensors(matmul, tmp_path, fake_pyxrt):
    s, args = _gemm(matmul)
    with pytest.raises(TargetError, match="bit packing on the host is not implemented"):
        tk.build(s, args, target=f"fpga_hls -device=xrt -xclbin={tmp_path / 'k.xclbin'} -data_type=ap_fixed<16,6>",
                 name="gemm")
