"""rtl.py: Verilog of gemm_accelerator's systolic array (the RTL twin of systolic.py), from Python.

`systolic_verilog(rows, cols)` writes three modules:
- `tk_pe`: one processing element: acc += a * b (int8 x int8 into int32), and a / b
  registered on to the right / lower neighbour;
- `tk_skew`: a shift register delaying a row (column) of the input by its index, the
  skewed feeding of the array;
- `tk_systolic_RxC`: the array. Each cycle the driver presents column k of A (`a_in`, row
  i in bits [8i+7:8i]) and row k of B (`b_in`); after K + R + C - 1 cycles `c_out` holds
  C[i][j] = sum_k A[i][k] * B[k][j] in bits [32(i*C+j)+31 : 32(i*C+j)]. `clear` zeroes
  the accumulators.

`testbench(rows, cols, k)` is a self-contained Verilog testbench reading A and B from
hex files and printing C; `run_iverilog` / `run_verilator` simulate it (tests compare
them with the HLS template's C-simulation), and `yosys_resources` synthesises the array
with `synth_xilinx` for the estimator's check.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from tensorkiln.ir.errors import CompileError, TargetError

__all__ = ["systolic_verilog", "testbench", "run_iverilog", "run_verilator", "yosys_resources", "top_name"]

_PE = """\
module tk_pe (
    input  wire               clk,
    input  wire               clear,
    input  wire signed [7:0]  a,
    input  wire signed [7:0]  b,
    output reg  signed [7:0]  a_out,
    output reg  signed [7:0]  b_out,
    output reg  signed [31:0] acc
);
    wire signed [15:0] product = a * b;
    always @(posedge clk) begin
        if (clear) begin
            acc <= 32'sd0;
            a_out <= 8'sd0;
            b_out <= 8'sd0;
        end else begin
            acc <= acc + {{16{product[15]}}, product};
            a_out <= a;
            b_out <= b;
        end
    end
endmodule

module tk_skew #(parameter DELAY = 1) (
    input  wire       clk,
    input  wire       clear,
    input  wire [7:0] in,
    output wire [7:0] out
);
    reg [7:0] stages [0:DELAY-1];
    integer s;
    always @(posedge clk) begin
        for (s = 0; s < DELAY; s = s + 1)
            stages[s] <= clear ? 8'd0 : (s == 0 ? in : stages[s - 1]);
    end
    assign out = stages[DELAY-1];
endmodule
"""


def top_name(rows: int, cols: int) -> str:
    return f"tk_systolic_{rows}x{cols}"


def systolic_verilog(rows: int, cols: int) -> str:
    """Verilog of the rows x cols int8 systolic array (see the module docstring)."""
    if rows < 1 or cols < 1:
        raise CompileError(f"systolic array {rows}x{cols}: both dimensions must be at least 1")
    lines = [_PE, f"module {top_name(rows, cols)} (",
             "    input  wire clk,", "    input  wire clear,",
             f"    input  wire [{8 * rows - 1}:0] a_in,", f"    input  wire [{8 * cols - 1}:0] b_in,",
             f"    output wire [{32 * rows * cols - 1}:0] c_out", ");"]
    for i in range(rows):
        for j in range(cols):
            lines.append(f"    wire signed [7:0] a_{i}_{j}, b_{i}_{j};   // inputs of PE ({i}, {j})")
            lines.append(f"    wire signed [7:0] a_out_{i}_{j}, b_out_{i}_{j};")
            lines.append(f"    wire signed [31:0] acc_{i}_{j};")
    for i in range(rows):   # row i of A enters PE (i, 0) i cycles late
        source = f"a_in[{8 * i + 7}:{8 * i}]"
        if i == 0:
            lines.append(f"    assign a_{i}_0 = {source};")
        else:
            lines.append(f"    tk_skew #(.DELAY({i})) skew_a_{i} (.clk(clk), .clear(clear), .in({source}), .out(a_{i}_0));")
    for j in range(cols):   # column j of B enters PE (0, j) j cycles late
        source = f"b_in[{8 * j + 7}:{8 * j}]"
        if j == 0:
            lines.append(f"    assign b_0_{j} = {source};")
        else:
            lines.append(f"    tk_skew #(.DELAY({j})) skew_b_{j} (.clk(clk), .clear(clear), .in({source}), .out(b_0_{j}));")
    for i in range(rows):
        for j in range(cols):
            if j > 0:
                lines.append(f"    assign a_{i}_{j} = a_out_{i}_{j - 1};")
            if i > 0:
                lines.append(f"    assign b_{i}_{j} = b_out_{i - 1}_{j};")
            lines.append(f"    tk_pe pe_{i}_{j} (.clk(clk), .clear(clear), .a(a_{i}_{j}), .b(b_{i}_{j}), "
                         f".a_out(a_out_{i}_{j}), .b_out(b_out_{i}_{j}), .acc(acc_{i}_{j}));")
            low = 32 * (i * cols + j)
            lines.append(f"    assign c_out[{low + 31}:{low}] = acc_{i}_{j};")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


def drain_cycles(rows: int, cols: int, k: int) -> int:
    """Cycles from the first input to a complete result: the last product k = K-1 reaches PE
    (R-1, C-1) at cycle K-1 + R-1 + C-1 and is in its accumulator one edge later."""
    return k + rows + cols - 1


def testbench(rows: int, cols: int, k: int) -> str:
    """A clocked testbench `tb(clk)` reading a.hex (K lines of rows bytes: column k of A) and
    b.hex (K lines of cols bytes: row k of B) and printing C row by row, one signed int per line.
    Inputs change on the falling edge; the first rising edge clears the array. Both simulators
    run this same module: iverilog under a clock generator, Verilator from a C++ loop."""
    top = top_name(rows, cols)
    cycles = drain_cycles(rows, cols, k)
    return f"""\
module tb (input wire clk);
    reg clear = 1;
    reg [{8 * rows - 1}:0] a_in = 0;
    reg [{8 * cols - 1}:0] b_in = 0;
    wire [{32 * rows * cols - 1}:0] c_out;
    reg [{8 * rows - 1}:0] a_mem [0:{k - 1}];
    reg [{8 * cols - 1}:0] b_mem [0:{k - 1}];
    integer cycle = 0;
    integer n;
    {top} dut (.clk(clk), .clear(clear), .a_in(a_in), .b_in(b_in), .c_out(c_out));
    initial begin
        $readmemh("a.hex", a_mem);
        $readmemh("b.hex", b_mem);
    end
    always @(negedge clk) begin
        clear <= 0;                // the first rising edge cleared the array
        a_in <= cycle < {k} ? a_mem[cycle] : 0;
        b_in <= cycle < {k} ? b_mem[cycle] : 0;
        if (cycle == {cycles}) begin
            for (n = 0; n < {rows * cols}; n = n + 1)
                $display("%0d", $signed(c_out[n * 32 +: 32]));
            $finish;
        end
        cycle <= cycle + 1;
    end
endmodule
"""


_ICARUS_CLOCK = """\
module clock;
    reg clk = 0;
    always #1 clk = ~clk;
    tb bench (.clk(clk));
endmodule
"""

_VERILATOR_MAIN = """\
#include "Vtb.h"
#include "verilated.h"
int main(int argc, char** argv) {
    VerilatedContext context;
    context.commandArgs(argc, argv);
    Vtb top(&context);
    top.clk = 0;
    top.eval();
    while (!context.gotFinish()) {
        top.clk = !top.clk;
        top.eval();
    }
    top.final();
    return 0;
}
"""


def _write_inputs(folder: Path, a: np.ndarray, b: np.ndarray) -> None:
    """a.hex: line k = A[:, k] with row 0 in the low byte; b.hex: line k = B[k, :]."""
    def line(values) -> str:
        return "".join(f"{int(v) & 0xFF:02x}" for v in reversed(values))
    (folder / "a.hex").write_text("\n".join(line(a[:, k]) for k in range(a.shape[1])) + "\n")
    (folder / "b.hex").write_text("\n".join(line(b[k, :]) for k in range(b.shape[0])) + "\n")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise TargetError(f"{name} is not installed; `apt-get install -y iverilog verilator yosys` "
                          "(scripts/setup.sh does)")
    return path


def _check(command: list[str], cwd: Path, what: str) -> str:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError(f"{what} failed: {' '.join(command[:4])}...\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def _prepare(folder: Path, a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    if a.dtype != np.int8 or b.dtype != np.int8 or a.shape[1] != b.shape[0]:
        raise CompileError(f"systolic RTL runs int8 A[R, K] @ B[K, C]; got {a.dtype}{a.shape} and {b.dtype}{b.shape}")
    rows, k = a.shape
    cols = b.shape[1]
    (folder / "array.v").write_text(systolic_verilog(rows, cols))
    (folder / "tb.v").write_text(testbench(rows, cols, k))
    _write_inputs(folder, a, b)
    return rows, cols, k


def _results(text: str, rows: int, cols: int) -> np.ndarray:
    values = [int(x) for x in text.split() if re.fullmatch(r"-?\d+", x)]
    if len(values) != rows * cols:
        raise CompileError(f"RTL simulation printed {len(values)} results, expected {rows * cols}:\n{text[-2000:]}")
    return np.array(values, dtype=np.int32).reshape(rows, cols)


def run_iverilog(a: np.ndarray, b: np.ndarray, folder: Path) -> np.ndarray:
    """C = A @ B (int32) from Icarus Verilog simulating the array."""
    rows, cols, _ = _prepare(folder, a, b)
    (folder / "clock.v").write_text(_ICARUS_CLOCK)
    _check([_tool("iverilog"), "-g2012", "-s", "clock", "-o", "sim.vvp", "clock.v", "tb.v", "array.v"], folder,
           "iverilog")
    return _results(_check([_tool("vvp"), "-n", "sim.vvp"], folder, "vvp"), rows, cols)


def run_verilator(a: np.ndarray, b: np.ndarray, folder: Path) -> np.ndarray:
    """C = A @ B (int32) from Verilator simulating the array, clocked by a C++ loop. The model is
    compiled without optimisation (OPT_FAST=-O0): it runs for microseconds, the build is what costs."""
    rows, cols, _ = _prepare(folder, a, b)
    (folder / "main.cpp").write_text(_VERILATOR_MAIN)
    _check([_tool("verilator"), "--cc", "--exe", "--build", "-j", "2", "-Wno-fatal", "-Wno-lint", "-Wno-style",
            "--top-module", "tb", "-MAKEFLAGS", "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0", "tb.v", "array.v",
            "main.cpp"], folder, "verilator")
    return _results(_check([str(folder.resolve() / "obj_dir" / "Vtb")], folder, "the Verilator model"), rows, cols)


_CELLS = re.compile(r"^\s+([A-Za-z_]\S*)\s+(\d+)\s*$")


def yosys_resources(rows: int, cols: int, folder: Path) -> dict[str, int]:
    """DSP, LUT, FF and BRAM counts of the array after yosys `synth_xilinx` (hls4ml report keys)."""
    (folder / "array.v").write_text(systolic_verilog(rows, cols))
    script = f"read_verilog array.v; synth_xilinx -top {top_name(rows, cols)} -flatten; stat"
    _check([_tool("yosys"), "-q", "-p", script, "-l", "yosys.log"], folder, "yosys synth_xilinx")
    text = (folder / "yosys.log").read_text()
    counts: dict[str, int] = {}
    stat = text[text.rfind("Number of cells"):]
    for line in stat.splitlines():
        found = _CELLS.match(line)
        if found:
            counts[found.group(1)] = counts.get(found.group(1), 0) + int(found.group(2))
    return {
        "DSP": sum(n for cell, n in counts.items() if cell.startswith("DSP")),
        "LUT": sum(n for cell, n in counts.items() if re.fullmatch(r"LUT\d", cell)),
        "FF": sum(n for cell, n in counts.items() if re.fullmatch(r"FD[A-Z]*", cell)),
        "BRAM_18K": sum(n for cell, n in counts.items() if cell.startswith("RAMB18")) +
        2 * sum(n for cell, n in counts.items() if cell.startswith("RAMB36")),
    }
