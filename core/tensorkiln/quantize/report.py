"""quantize/report.py: how far each precision is from float32, layer by layer, and how fast it runs.

    report = precision_report(mod, calibration, held_out)           # float32, float16, int8
    print(report.render()); json.dump(report.to_json(), file)

For int8, every quantized layer (conv2d / dense) is compared with its float32 twin on the
first `layer_samples` held-out inputs: max |error| and cosine similarity of the layer's
output. For every precision: top-1 agreement with float32 over all held-out inputs, the
cosine of the logits (mean and worst), the max |error| of the outputs, and the median
latency of one run on the target.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ..graph import Module
from ..ir.errors import TensorkilnError
from ..passes.mixed_precision import LOW_PRECISION_DTYPES, to_mixed_precision
from .calibrate import as_feeds, probe
from .realize import QuantizeConfig, QuantizedModel, quantize

__all__ = ["LayerError", "PrecisionResult", "PrecisionReport", "precision_report", "cosine", "compare_outputs"]

PRECISIONS = ("float32", "float16", "bfloat16", "int8")


@dataclass(frozen=True)
class LayerError:
    name: str
    op: str
    shape: tuple[int, ...]
    max_abs_error: float
    cosine: float


@dataclass(frozen=True)
class PrecisionResult:
    precision: str
    latency_ms: float
    top1_agreement: float
    cosine_mean: float
    cosine_min: float
    max_abs_error: float
    centered_cosine_mean: float


@dataclass
class PrecisionReport:
    results: dict[str, PrecisionResult]
    layers: list[LayerError] = field(default_factory=list)
    samples: int = 0
    target: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "held_out_samples": self.samples,
                "precisions": {k: asdict(v) for k, v in self.results.items()},
                "int8_layers": [asdict(layer) for layer in self.layers]}

    def render(self) -> str:
        reference = self.results.get("float32")
        lines = [f"precision report on {self.target}, {self.samples} held-out inputs",
                 f"{'precision':<10} {'latency ms':>10} {'vs fp32':>8} {'top-1':>7} {'cos mean':>9} {'cos min':>9} "
                 f"{'max |err|':>10} {'centered cos':>12}"]
        for name, r in self.results.items():
            ratio = r.latency_ms / reference.latency_ms if reference and reference.latency_ms else float("nan")
            lines.append(f"{name:<10} {r.latency_ms:10.2f} {ratio:7.2f}x {100 * r.top1_agreement:6.1f}% "
                         f"{r.cosine_mean:9.5f} {r.cosine_min:9.5f} {r.max_abs_error:10.4g} "
                         f"{r.centered_cosine_mean:12.5f}")
        if self.layers:
            lines.append(f"int8 layers ({len(self.layers)}): worst cosine first")
            for layer in sorted(self.layers, key=lambda l: l.cosine)[:10]:
                lines.append(f"  {layer.name:<40} {layer.op:<10} cos {layer.cosine:.5f}  max |err| "
                             f"{layer.max_abs_error:.4g}")
        return "\n".join(lines)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    if norms == 0:
        return 1.0 if np.array_equal(a, b) else 0.0
    return float(np.dot(a, b) / norms)


def compare_outputs(reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> dict[str, float]:
    """Top-1 agreement (argmax over the last axis), cosine (mean, min) and max |error| of paired outputs,
    and the cosine of their input-dependent parts: both minus the reference's mean over the samples.

    The centered cosine matters for models whose outputs are mostly the same for every input (a
    classifier with random weights on random inputs): the plain cosine is then close to 1 whatever
    the precision does to the part that depends on the input."""
    agree = [np.array_equal(np.argmax(r, axis=-1), np.argmax(c, axis=-1)) for r, c in zip(reference, candidate)]
    cosines = [cosine(r, c) for r, c in zip(reference, candidate)]
    errors = [float(np.max(np.abs(np.asarray(r, np.float64) - c))) for r, c in zip(reference, candidate)]
    mean = np.mean([np.asarray(r, np.float64) for r in reference], axis=0)
    centered = [cosine(r - mean, c - mean) for r, c in zip(reference, candidate)] if len(reference) > 1 else [1.0]
    return {"top1_agreement": float(np.mean(agree)), "cosine_mean": float(np.mean(cosines)),
            "cosine_min": float(np.min(cosines)), "max_abs_error": float(np.max(errors)),
            "centered_cosine_mean": float(np.mean(centered))}


def _latency_ms(lib, feeds, repeat: int) -> float:
    lib.run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        lib.run(feeds)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _first_output(lib, feeds) -> np.ndarray:
    return np.asarray(list(lib.run(feeds))[0], np.float32)


def precision_report(model: Any, calibration: Iterable[Any], held_out: Iterable[Any],
                     precisions: Sequence[str] = ("float32", "float16", "int8"), target: str = "cpu_llvm",
                     config: QuantizeConfig | None = None, quantized: QuantizedModel | None = None,
                     repeat: int = 10, layer_samples: int = 4) -> PrecisionReport:
    """Compile `model` in each of `precisions` for `target` and compare each with float32 (see the module doc).

    `quantized` reuses a QuantizedModel (else the model is quantized here with `config`, calibrated on
    `calibration`). The model's first output is compared (logits for a classifier).
    """
    from ..compiler import compile as compile_model

    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown:
        raise TensorkilnError(f"unknown precisions {unknown}; use {', '.join(PRECISIONS)}")
    config = config or QuantizeConfig(target=target)
    quantized = quantized or quantize(model, calibration, config)
    float_module: Module = quantized.float_module
    feeds = [as_feeds(float_module, s) for s in held_out]
    if not feeds:
        raise TensorkilnError("the precision report needs at least one held-out input")
    modules = {"float32": float_module, "int8": quantized.module}
    for dtype in LOW_PRECISION_DTYPES:
        modules[dtype] = to_mixed_precision(float_module, dtype)
    libs = {p: compile_model(modules[p], target) for p in dict.fromkeys(("float32", *precisions))}
    reference = [_first_output(libs["float32"], f) for f in feeds]
    results = {}
    for precision in precisions:
        outputs = reference if precision == "float32" else [_first_output(libs[precision], f) for f in feeds]
        results[precision] = PrecisionResult(precision, _latency_ms(libs[precision], feeds[0], repeat),
                                             **compare_outputs(reference, outputs))
    layers = _layer_errors(quantized, feeds[:layer_samples], target) if "int8" in precisions else []
    return PrecisionReport(results, layers, len(feeds), str(target))


def _layer_errors(quantized: QuantizedModel, feeds, target) -> list[LayerError]:
    """Each int8 layer's output against its float32 twin (both compiled as extra outputs of the model)."""
    float_lib, skip = probe(quantized.float_module, [f for f, _ in quantized.pairs], target)
    int8_lib, _ = probe(quantized.module, [q for _, q in quantized.pairs], target)
    worst_error = np.zeros(len(quantized.pairs))
    cosines: list[list[float]] = [[] for _ in quantized.pairs]
    for feed in feeds:
        expected, got = list(float_lib.run(feed))[skip:], list(int8_lib.run(feed))[skip:]
        for i, (e, g) in enumerate(zip(expected, got)):
            worst_error[i] = max(worst_error[i], float(np.max(np.abs(e.astype(np.float64) - g))))
            cosines[i].append(cosine(e, g))
    return [LayerError(f.span or f"{f.op.name}_{i}", f.op.name, tuple(f.checked_type.shape), float(worst_error[i]),
                       float(np.mean(cosines[i]))) for i, (f, _) in enumerate(quantized.pairs)]
