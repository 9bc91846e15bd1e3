"""Post-training INT8 quantization and the precision report.

    qmodel = tk.quantize.quantize(mod, calibration_inputs, method="entropy", activations="symmetric")
    lib = tk.compile(qmodel.module, "cpu_llvm")              # int8 convs / dense, int32 accumulation
    report = tk.quantize.precision_report(mod, calibration_inputs, held_out_inputs)

`realize.py` rewrites a float graph into the QDQ form (per-channel symmetric int8 weights,
per-tensor activations) that the compiler's fold_qdq pass runs as integer ops;
`calibrate.py` finds the activation ranges (min/max, percentile, KL entropy); `report.py`
compares each precision (float32, float16, bfloat16, int8) with float32 layer by layer, on
top-1 and logits, and by speed; `cli.py` is `tensorkiln quantize`.
"""
from .calibrate import METHODS, Range, calibrate, entropy_threshold
from .realize import QuantizeConfig, QuantizedModel, activation_params, anchors_of, prepare, quantize, weight_scales
from .report import PRECISIONS, LayerError, PrecisionReport, PrecisionResult, compare_outputs, cosine, precision_report

__all__ = ["METHODS", "Range", "calibrate", "entropy_threshold", "QuantizeConfig", "QuantizedModel",
           "activation_params", "anchors_of", "prepare", "quantize", "weight_scales", "PRECISIONS", "LayerError",
           "PrecisionReport", "PrecisionResult", "compare_outputs", "cosine", "precision_report"]
