"""test_fpga_lint.py: golden cases of the HLS pragma linter, for every pragma it knows.

Each case is a small kernel, the tool spelling, and the exact problems the linter must
report (an empty list: the kernel is clean). g++ would accept every one of them.
"""
from __future__ import annotations

import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln_fpga_hls.lint import KNOWN_PRAGMAS, PragmaLintError, lint_source
from tensorkiln_fpga_hls.pragmas import spelling_for

MODERN, LEGACY = spelling_for("vitis-2023.2"), spelling_for("vivado-2019.2")


def kernel(*body: str, params: str = "const float* A, float* C") -> str:
    return "\n".join([f'extern "C" void k({params}) {{', *body, "}"])


def loop(*body: str, label: str = "L_i") -> list[str]:
    return [f"{label}: for (int i = 0; i < 8; ++i) {{", *body, "C[i] = A[i];", "}"]


GOLDEN = [
    # PIPELINE
    ("pipeline ok", kernel(*loop("#pragma HLS PIPELINE II=2")), MODERN, []),
    ("pipeline at function top", kernel("#pragma HLS PIPELINE II=1", *loop()), MODERN, []),
    ("pipeline in an if", kernel("if (A[0] > 0) {", "#pragma HLS PIPELINE II=1", "}"), MODERN,
     ["line 3: PIPELINE: must be inside a loop body (or at the top of a function)"]),
    ("pipeline II=0", kernel(*loop("#pragma HLS PIPELINE II=0")), MODERN, ["line 3: PIPELINE: II must be at least 1"]),
    ("pipeline II text", kernel(*loop("#pragma HLS PIPELINE II=fast")), MODERN,
     ["line 3: PIPELINE: option II=fast must match \\d+"]),
    ("pipeline unknown option", kernel(*loop("#pragma HLS PIPELINE interval=2")), MODERN,
     ["line 3: PIPELINE: unknown option 'interval'; PIPELINE takes II, off, rewind, style"]),
    # UNROLL
    ("unroll ok", kernel(*loop("#pragma HLS UNROLL factor=4")), MODERN, []),
    ("unroll full", kernel(*loop("#pragma HLS UNROLL")), MODERN, []),
    ("unroll outside a loop", kernel("#pragma HLS UNROLL", *loop()), MODERN,
     ["line 2: UNROLL: must be the first statement of a loop body"]),
    ("unroll bad factor", kernel(*loop("#pragma HLS UNROLL factor=-2")), MODERN,
     ["line 3: UNROLL: option factor=-2 must match \\d+"]),
    # LOOP_TRIPCOUNT
    ("tripcount ok", kernel(*loop("#pragma HLS LOOP_TRIPCOUNT min=1 max=8 avg=4")), MODERN, []),
    ("tripcount order", kernel(*loop("#pragma HLS LOOP_TRIPCOUNT min=8 max=1")), MODERN,
     ["line 3: LOOP_TRIPCOUNT: min=8 avg=4 max=1 must satisfy min <= avg <= max"]),
    ("tripcount missing max", kernel(*loop("#pragma HLS LOOP_TRIPCOUNT min=1")), MODERN,
     ["line 3: LOOP_TRIPCOUNT: needs min= and max="]),
    ("tripcount outside a loop", kernel("#pragma HLS LOOP_TRIPCOUNT min=1 max=8", *loop()), MODERN,
     ["line 2: LOOP_TRIPCOUNT: must be the first statement of a loop body"]),
    # ARRAY_PARTITION
    ("partition ok", kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf type=cyclic factor=4 dim=1",
                            *loop()), MODERN, []),
    ("partition complete", kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf type=complete dim=0"),
     MODERN, []),
    ("partition an m_axi argument", kernel("#pragma HLS ARRAY_PARTITION variable=A type=complete dim=0"), MODERN,
     ["line 2: ARRAY_PARTITION: variable=A is a function argument (an m_axi port in DRAM); partition or stream a "
      "local copy (cache_read / an intermediate stage) instead"]),
    ("partition undeclared", kernel("#pragma HLS ARRAY_PARTITION variable=buf type=complete dim=0", "float buf[4];"),
     MODERN, ["line 2: ARRAY_PARTITION: variable=buf is not declared before the pragma in an enclosing scope"]),
    ("partition cyclic without factor", kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf type=cyclic"),
     MODERN, ["line 3: ARRAY_PARTITION: a cyclic partition needs factor="]),
    ("partition complete with factor",
     kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf type=complete factor=2"), MODERN,
     ["line 3: ARRAY_PARTITION: a complete partition takes no factor="]),
    ("partition legacy spelling on vitis",
     kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf cyclic factor=2 dim=1"), MODERN,
     ["line 3: ARRAY_PARTITION: 'cyclic' is the pre-2022 spelling; Vitis HLS 2022+ writes type=cyclic"]),
    ("partition modern spelling on vivado",
     kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf type=cyclic factor=2 dim=1"), LEGACY,
     ["line 3: ARRAY_PARTITION: type= is Vitis HLS 2022+ spelling; this tool writes the bare keyword (cyclic)"]),
    ("partition legacy ok", kernel("float buf[64];", "#pragma HLS ARRAY_PARTITION variable=buf block factor=2 dim=1"),
     LEGACY, []),
    # STREAM
    ("stream ok", kernel('tk::stream<float> s("s", 4);', "#pragma HLS STREAM variable=s depth=4"), MODERN, []),
    ("stream an argument", kernel("#pragma HLS STREAM variable=C depth=4"), MODERN,
     ["line 2: STREAM: variable=C is a function argument (an m_axi port in DRAM); partition or stream a local copy "
      "(cache_read / an intermediate stage) instead"]),
    ("stream bad depth", kernel('tk::stream<float> s("s", 4);', "#pragma HLS STREAM variable=s depth=deep"), MODERN,
     ["line 3: STREAM: option depth=deep must match \\d+"]),
    # DATAFLOW
    ("dataflow ok", kernel("#pragma HLS DATAFLOW", *loop()), MODERN, []),
    ("dataflow in a loop", kernel(*loop("#pragma HLS DATAFLOW")), MODERN,
     ["line 3: DATAFLOW: must be at function scope, not inside a loop or block"]),
    ("dataflow with a value", kernel("#pragma HLS DATAFLOW disable_start_propagation=1"), MODERN,
     ["line 2: DATAFLOW: option disable_start_propagation takes no value"]),
    # INTERFACE
    ("interface ok", kernel("#pragma HLS INTERFACE mode=m_axi port=A bundle=gmem0 depth=8 offset=slave",
                            "#pragma HLS INTERFACE mode=s_axilite port=return bundle=control"), MODERN, []),
    ("interface legacy ok", kernel("#pragma HLS INTERFACE m_axi port=A bundle=gmem0 depth=8 offset=slave"), LEGACY, []),
    ("interface unknown port", kernel("#pragma HLS INTERFACE mode=m_axi port=X bundle=gmem0"), MODERN,
     ["line 2: INTERFACE: port=X is not an argument of the function"]),
    ("interface bad mode", kernel("#pragma HLS INTERFACE mode=pcie port=A"), MODERN,
     ["line 2: INTERFACE: option mode=pcie must match m_axi|s_axilite|axis|ap_none|ap_vld|ap_ack|ap_hs|ap_ovld|"
      "ap_fifo|ap_memory|bram|ap_ctrl_none|ap_ctrl_hs|ap_ctrl_chain"]),
    ("interface in a loop", kernel(*loop("#pragma HLS INTERFACE mode=s_axilite port=return")), MODERN,
     ["line 3: INTERFACE: must be at function scope, not inside a loop or block"]),
    ("interface without port", kernel("#pragma HLS INTERFACE mode=s_axilite bundle=control"), MODERN,
     ["line 2: INTERFACE: needs port="]),
    ("interface legacy mode on vitis", kernel("#pragma HLS INTERFACE m_axi port=A"), MODERN,
     ["line 2: INTERFACE: 'm_axi' is the pre-2022 spelling; Vitis HLS 2022+ writes mode=m_axi"]),
    # INLINE
    ("inline ok", kernel("#pragma HLS INLINE off"), MODERN, []),
    ("inline bad option", kernel("#pragma HLS INLINE always"), MODERN,
     ["line 2: INLINE: unknown option 'always'; INLINE takes off, recursive"]),
    # names
    ("unknown pragma", kernel(*loop("#pragma HLS PIPELINED II=1")), MODERN,
     ["line 3: PIPELINED: unknown pragma; known: PIPELINE, UNROLL, LOOP_TRIPCOUNT, ARRAY_PARTITION, STREAM, "
      "DATAFLOW, INTERFACE, INLINE"]),
]


@pytest.mark.parametrize("source, spelling, expected", [case[1:] for case in GOLDEN], ids=[c[0] for c in GOLDEN])
def test_golden(source, spelling, expected):
    assert [str(p) for p in lint_source(source, spelling)] == expected


def test_every_known_pragma_has_a_clean_and_a_refused_golden_case():
    for name in KNOWN_PRAGMAS:
        cases = [c for c in GOLDEN if f"#pragma HLS {name} " in c[1] + " " or f"#pragma HLS {name}\n" in c[1]]
        assert any(not c[3] for c in cases), f"{name}: no clean case"
        assert any(c[3] for c in cases), f"{name}: no refused case"


def test_emitted_sources_are_clean_in_both_spellings(matmul):
    from tensorkiln_fpga_hls.intrinsics import gemm_intrinsic
    for version in ("vitis-2023.2", "vivado-2019.2"):
        target = tk.target(f"fpga_hls -tool_version={version}")
        a, b, c = matmul(32)
        s = te.create_schedule(c.op)
        s[c].tensorize(s[c].op.axis[0], gemm_intrinsic())
        source = target.spec.emitter.emit([tk.lower(s, [a, b, c], name="mm")], target).source
        assert lint_source(source, spelling_for(version)) == []


def test_an_ii_below_the_memory_ports_is_refused():
    a = te.placeholder((64, 4), name="A")
    c = te.compute((64,), lambda i: a[i, 0] + a[i, 1] + a[i, 2] + a[i, 3], name="C")
    s = te.create_schedule(c.op)
    s[c].pipeline(c.op.axis[0], 1)
    with pytest.raises(PragmaLintError, match=r"loop i of kernel sum4: II=1 is below 4, what its memory ports allow"):
        tk.build(s, [a, c], target="fpga_hls", name="sum4")
    ok = te.create_schedule(c.op)
    ok[c].pipeline(c.op.axis[0], 4)
    target = tk.target("fpga_hls")
    target.spec.emitter.emit([tk.lower(ok, [a, c], name="sum4")], target)
