"""benchmarks/onnx_coverage.py: onnx's node tests through the standard backend protocol on tensorkiln
(cpu_llvm) and on onnxruntime, and sdk_docs/onnx_coverage.md, the per-test report of what tensorkiln
does not pass and why.

    python benchmarks/onnx_coverage.py [--target cpu_llvm] [--jobs N] [--output sdk_docs/onnx_coverage.md]
                                       [-k NAME] [--json FILE] [--from-json FILE]

Both sides run through the same harness, `tensorkiln.node_tests.run_node_tests(protocol="standard")`:
`backend.prepare(model)` then `rep.run(list_of_inputs)`, nothing bound, outputs compared with onnx's
expected values at the case's tolerances. onnxruntime is driven through `InferenceSession` on its CPU
provider by a minimal onnx backend defined here. The case data are generated in-process by onnx
(`collect_testcases`) from numpy's global generator, which each worker seeds, so two runs write the
same report (two full runs wrote identical files). Cases are sharded by name over `--jobs` processes
(the onnxruntime run is one more): a full run took 136 s of CPU in all, 272 s of wall time on 2 cores
shared with other work (load average 7-14).

The report is generated, never edited by hand: a reason per case is the curated one-liner of
REASONS when one matches the case (what the error message alone does not say), else tensorkiln's
own error or mismatch message.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEED = 0

# (regex on the case name, reason): for cases whose message does not say why on its own.
REASONS: list[tuple[str, str]] = [
    (r"^test_image_decoder_", "ImageDecoder decodes JPEG/PNG/BMP/WebP/TIFF/PNM bytes: it needs image codec "
                              "libraries in the runtime, outside what a tensor compiler builds"),
    (r"^test_bernoulli(_double)?(_expanded)?$", "random output without a seed: every run must draw new numbers, "
                                                "and the expected values are one numpy draw no implementation "
                                                "reproduces (seeded random ops are supported)"),
    (r"^test_bernoulli_seed", "random output: the expected values are numpy's global draws when onnx generated "
                              "the case, not draws of the seed (onnx: 'may not produce the same values in "
                              "different implementations even if a seed is specified')"),
    (r"^test_dft_inverse", "expected values are numpy's complex64 FFT, whose rounding leaves 1.9e-7 where the "
                           "exact inverse is 0 (atol 1e-7); tensorkiln's error is ~1e-15"),
    (r"^test_attention_4d_causal_fp16", "float16 rounding along Attention's long function body (the plain case "
                                         "imports through it too): 2 float16 ulps off on 2 of 192 elements, over "
                                         "rtol 1e-3 (onnxruntime is 1 ulp off there)"),
    (r"^test_maxunpool_export_with_output_shape$", "onnx's Python reference places values by the inferred shape; "
                                                   "tensorkiln reads the indices in output_shape as onnxruntime "
                                                   "and PyTorch do"),
]


def _reason(name: str, detail: str) -> str:
    for pattern, reason in REASONS:
        if re.search(pattern, name):
            return reason
    return detail


class OnnxruntimeBackend:
    """The two calls of onnx's backend protocol that run_node_tests makes, on onnxruntime's CPU provider."""

    class Rep:
        def __init__(self, session, names: list[str]) -> None:
            self.session, self.names = session, names

        def run(self, inputs, **kwargs):
            return tuple(self.session.run(None, dict(zip(self.names, inputs))))

    target = "onnxruntime"
    op_types: dict[str, str] = {}   # test name (onnx names each case's graph after it) -> its node's op type

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs):
        import onnxruntime
        cls.op_types[model.graph.name] = model.graph.node[0].op_type if len(model.graph.node) else ""
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 4
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        initializers = {t.name for t in model.graph.initializer}
        return cls.Rep(session, [i.name for i in model.graph.input if i.name not in initializers])


def _in_shard(name: str, shard: int, shards: int) -> bool:
    return zlib.crc32(name.encode()) % shards == shard


def _run_shard(job: tuple) -> list[dict]:
    """One worker: run its shard of the cases on `backend_name` ("onnxruntime" or a tensorkiln target)."""
    backend_name, shard, shards, name_filter = job
    import warnings

    import numpy as np
    warnings.simplefilter("ignore")
    np.random.seed(SEED)   # onnx draws the case data from numpy's global generator
    from tensorkiln.node_tests import run_node_tests
    if backend_name == "onnxruntime":
        backend = OnnxruntimeBackend
    else:
        from tensorkiln.onnx_backend import backend_for
        backend = backend_for(backend_name)

    def selected(name: str) -> bool:
        return _in_shard(name, shard, shards) and (name_filter is None or name_filter in name)
    results = run_node_tests(backend=backend, protocol="standard", name_filter=selected)
    rows = [dict(name=r.name, status=r.status, float32=r.is_float32_only, detail=r.detail) for r in results]
    if backend_name == "onnxruntime":
        rows.append(dict(name="", ops=OnnxruntimeBackend.op_types))
    return rows


def run(target: str, jobs: int, name_filter: str | None) -> tuple[dict, dict, dict]:
    """{name: row} for tensorkiln on `target` and for onnxruntime, and {case name: op type}."""
    work = [(target, shard, jobs, name_filter) for shard in range(jobs)] + [("onnxruntime", 0, 1, name_filter)]
    with multiprocessing.get_context("spawn").Pool(len(work)) as pool:
        parts = pool.map(_run_shard, work, chunksize=1)
    ops = parts[-1].pop()["ops"]
    ours = {row["name"]: row for part in parts[:-1] for row in part}
    theirs = {row["name"]: row for row in parts[-1]}
    return ours, theirs, ops


def _counts(rows: dict, float32: bool = False) -> tuple[int, int]:
    selected = [r for r in rows.values() if r["float32"] or not float32]
    return sum(r["status"] == "pass" for r in selected), len(selected)


def _rate(rows: dict, float32: bool = False) -> str:
    passed, total = _counts(rows, float32)
    return f"{passed} / {total} ({100 * passed / max(total, 1):.1f}%)"


def _cell(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _cases(count: int) -> str:
    return f"{count} case{'' if count == 1 else 's'}"


def _op_of(name: str, ops: dict) -> str:
    base = re.sub(r"\[\d+\]$", "", name)
    return ops.get(base.removesuffix("_expanded")) or ops.get(base, "?")


def report(ours: dict, theirs: dict, ops: dict, target: str) -> str:
    import onnx
    import onnxruntime
    missing = sorted(name for name, row in ours.items() if row["status"] != "pass")
    ort_only = [name for name in missing if theirs.get(name, {}).get("status") == "pass"]
    by_op: dict[str, list[str]] = {}
    for name in ort_only:
        by_op.setdefault(_op_of(name, ops), []).append(name)
    lines = [
        "# ONNX node-test coverage: tensorkiln and onnxruntime",
        "",
        "Generated by `python benchmarks/onnx_coverage.py`; do not edit by hand. Every case of onnx's node tests "
        "runs through onnx's standard backend protocol, `prepare(model)` then `run(list_of_inputs)` with nothing "
        "bound, on both sides, and is compared with onnx's expected outputs at the case's tolerances "
        "(`tensorkiln.node_tests`).",
        "",
        f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__} (CPUExecutionProvider), tensorkiln on "
        f"`{target}`.",
        "",
        f"| cases | tensorkiln ({target}) | onnxruntime |",
        "|---|---|---|",
        f"| all | {_rate(ours)} | {_rate(theirs)} |",
        f"| float32 only | {_rate(ours, True)} | {_rate(theirs, True)} |",
        "",
        f"## Ops whose cases onnxruntime passes and tensorkiln does not ({_cases(len(ort_only))})",
        "",
        "| op | cases | reason (first case) |",
        "|---|---|---|",
    ]
    for op in sorted(by_op):
        names = by_op[op]
        first = ours[names[0]]
        lines.append(f"| {op} | {_cell(', '.join(names), 400)} | {_cell(_reason(names[0], first['detail']))} |")
    lines += [
        "",
        f"## Every case tensorkiln does not pass ({_cases(len(missing))})",
        "",
        "Status `unsupported`: tensorkiln refuses the model with an error saying what it lacks; `fail`: it runs "
        "and the values (or a crash) differ. The onnxruntime column says whether onnxruntime passes the case.",
        "",
        "| case | op | status | onnxruntime | reason |",
        "|---|---|---|---|---|",
    ]
    for name in missing:
        row = ours[name]
        ort = theirs.get(name, {}).get("status", "not run")
        lines.append(f"| {name} | {_op_of(name, ops)} | {row['status']} | {'pass' if ort == 'pass' else 'no'} | "
                     f"{_cell(_reason(name, row['detail']))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu_llvm")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes for the tensorkiln run (onnxruntime runs in one more)")
    parser.add_argument("--output", default=str(ROOT / "sdk_docs" / "onnx_coverage.md"))
    parser.add_argument("--json", default=None, help="also write every case's status and reason on both sides here")
    parser.add_argument("-k", default=None, help="only cases whose name contains this text (the report is partial)")
    parser.add_argument("--from-json", default=None,
                        help="rewrite the report from a --json file of an earlier run instead of running (after "
                             "editing REASONS)")
    args = parser.parse_args(argv)
    start = time.time()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        ours, theirs, ops = saved["tensorkiln"], saved["onnxruntime"], saved["ops"]
    else:
        ours, theirs, ops = run(args.target, max(1, args.jobs), args.k)
    Path(args.output).write_text(report(ours, theirs, ops, args.target))
    if args.json:
        Path(args.json).write_text(json.dumps({"tensorkiln": ours, "onnxruntime": theirs, "ops": ops}, indent=1, sort_keys=True))
    print(f"tensorkiln {args.target}: all {_rate(ours)}, float32 only {_rate(ours, True)}")
    print(f"onnxruntime:        all {_rate(theirs)}, float32 only {_rate(theirs, True)}")
    print(f"wrote {args.output} in {time.time() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
