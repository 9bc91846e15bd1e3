"""pragmas.py: HLS pragma text, spelled for the tool version the target names.

`PragmaSpelling` renders each pragma the emitter writes. Two spellings exist:
- "vitis" (Vitis HLS 2022.1 and later): `INTERFACE mode=m_axi port=A ...`,
  `ARRAY_PARTITION variable=B type=cyclic factor=4 dim=1`;
- "vivado" (Vivado HLS 2019.x / Vitis HLS 2020): `INTERFACE m_axi port=A ...`,
  `ARRAY_PARTITION variable=B cyclic factor=4 dim=1`.
Chosen by the target option `-tool_version` (e.g. "vitis-2023.2", "vivado-2019.2").
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tensorkiln.ir.errors import TargetError

__all__ = ["PragmaSpelling", "spelling_for", "respell", "TOOL_VERSIONS"]

TOOL_VERSIONS = ("vitis-2023.2", "vitis-2022.2", "vitis-2020.2", "vivado-2019.2")


@dataclass(frozen=True)
class PragmaSpelling:
    """How one tool generation writes the pragmas; `modern` means Vitis HLS 2022+ keywords."""

    modern: bool

    def interface(self, mode: str, port: str, **options) -> str:
        head = f"mode={mode} port={port}" if self.modern else f"{mode} port={port}"
        tail = "".join(f" {key}={value}" for key, value in options.items() if value is not None)
        return f"#pragma HLS INTERFACE {head}{tail}"

    def pipeline(self, ii: int) -> str:
        return f"#pragma HLS PIPELINE II={ii}"

    def unroll(self, factor: int | None = None) -> str:
        return "#pragma HLS UNROLL" if factor is None else f"#pragma HLS UNROLL factor={factor}"

    def loop_tripcount(self, low: int, high: int, avg: int) -> str:
        return f"#pragma HLS LOOP_TRIPCOUNT min={low} max={high} avg={avg}"

    def array_partition(self, variable: str, kind: str, factor: int | None, dim: int = 1) -> str:
        what = f"type={kind}" if self.modern else kind
        factor_text = "" if factor is None else f" factor={factor}"
        dim_text = " dim=0" if kind == "complete" else f" dim={dim}"
        return f"#pragma HLS ARRAY_PARTITION variable={variable} {what}{factor_text}{dim_text}"

    def stream(self, variable: str, depth: int) -> str:
        return f"#pragma HLS STREAM variable={variable} depth={depth}"

    def dataflow(self) -> str:
        return "#pragma HLS DATAFLOW"


def spelling_for(tool_version: str) -> PragmaSpelling:
    """The spelling of `tool_version` ("vitis-2023.2", "vivado-2019.2", ...)."""
    tool, _, version = (tool_version or "").partition("-")
    try:
        year = int(version.split(".")[0])
    except ValueError:
        year = 0
    if tool not in ("vitis", "vivado") or year < 2015:
        raise TargetError(f"fpga_hls: -tool_version={tool_version!r} is not a tool and year such as "
                          f"{', '.join(TOOL_VERSIONS)}")
    return PragmaSpelling(modern=tool == "vitis" and year >= 2022)


_MODERN_PARTITION = re.compile(r"(#pragma HLS ARRAY_PARTITION variable=\S+) type=(\w+)")
_MODERN_INTERFACE = re.compile(r"(#pragma HLS INTERFACE) mode=(\w+)")


def respell(text: str, spelling: PragmaSpelling) -> str:
    """`text` (intrinsic templates are written in the modern spelling) in `spelling`'s keywords."""
    if spelling.modern:
        return text
    return _MODERN_INTERFACE.sub(r"\1 \2", _MODERN_PARTITION.sub(r"\1 \2", text))
