"""tests/fuzz/worker.py: runs fuzz cases for harness.py, one process for many cases.

    python -m tests.fuzz.worker    # reads one JSON request a line on stdin, answers on stdout

A request is {"model": base64 bytes, "input_seed": int}. For each, the worker writes
{"stage": ...} lines as it goes (so the harness knows where a crash or a hang
happened), then one {"result": {...}} line:

- tensorkiln: from_onnx -> tk.compile(target="cpu_llvm") -> run with random inputs
  ("tk": "ok" with outputs, "error" for a TensorkilnError, "exception" for any other);
- onnxruntime, only when tensorkiln succeeded: the same model and inputs ("ort": "ok",
  "load_error" or "run_error" with its message), and the comparison of the outputs.

Both run with a small memory limit (MEMORY_LIMIT), so a huge shape is refused, not
allocated; stray prints of the libraries go to stderr, never into the protocol.
"""
from __future__ import annotations

import base64
import json
import os
import sys
import traceback

import numpy as np

MEMORY_LIMIT = 512 << 20
RTOL, ATOL = 1e-3, 1e-4


def _send(channel, message: dict) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _symbolic_bindings(model_bytes: bytes) -> dict:
    """Bind every symbolic input dimension to 1 (the fuzzer's models run with batch 1)."""
    import onnx
    try:
        model = onnx.load_model_from_string(model_bytes)
    except Exception:
        return {}
    shapes = {}
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and any(not d.HasField("dim_value") for d in dims):
            shapes[value.name] = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
    return shapes


def _random_inputs(lib, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    inputs = {}
    for info in lib.input_info():
        dtype = np.dtype(info["dtype"])
        shape = tuple(info["shape"])
        if dtype.kind == "f":
            inputs[info["name"]] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            inputs[info["name"]] = rng.random(shape) < 0.5
        elif dtype.kind == "u":
            inputs[info["name"]] = rng.integers(0, 10, shape).astype(dtype)
        else:
            inputs[info["name"]] = rng.integers(-5, 6, shape).astype(dtype)
    return inputs


def _run_tensorkiln(model_bytes: bytes, seed: int, channel) -> dict:
    import tensorkiln as tk
    from tensorkiln.ir.errors import TensorkilnError
    try:
        _send(channel, {"stage": "import"})
        mod = tk.frontend.from_onnx(model_bytes, shape=_symbolic_bindings(model_bytes) or None,
                                    memory_limit=MEMORY_LIMIT)
        _send(channel, {"stage": "compile"})
        lib = tk.compile(mod, target="cpu_llvm", memory_limit=MEMORY_LIMIT)
        inputs = _random_inputs(lib, seed)
        _send(channel, {"stage": "run"})
        outputs = lib.run(inputs)
        return {"tk": "ok", "inputs": inputs, "outputs": [np.asarray(o) for o in outputs]}
    except TensorkilnError as error:
        return {"tk": "error", "type": type(error).__name__, "message": str(error)[:2000]}
    except Exception as error:  # what the fuzzer looks for: anything but a TensorkilnError
        return {"tk": "exception", "type": type(error).__name__, "message": str(error)[:2000],
                "traceback": traceback.format_exc()[-4000:]}


def _run_onnxruntime(model_bytes: bytes, inputs: dict, channel) -> dict:
    import onnxruntime as ort
    _send(channel, {"stage": "onnxruntime"})
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as error:
        return {"ort": "load_error", "ort_message": str(error)[:1000]}
    try:
        outputs = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs() if i.name in inputs})
    except Exception as error:
        return {"ort": "run_error", "ort_message": str(error)[:1000]}
    return {"ort": "ok", "ort_outputs": outputs}


def compare(ours: list, theirs: list) -> str:
    """'' when the outputs match (dtype, shape, values within RTOL/ATOL, NaN where NaN), else why not."""
    if len(ours) != len(theirs):
        return f"{len(ours)} outputs, onnxruntime gives {len(theirs)}"
    for index, (a, b) in enumerate(zip(ours, theirs)):
        b = np.asarray(b)
        if a.dtype != b.dtype:
            return f"output {index}: dtype {a.dtype}, onnxruntime gives {b.dtype}"
        if a.shape != b.shape:
            return f"output {index}: shape {a.shape}, onnxruntime gives {b.shape}"
        if a.dtype.kind in "fc":
            close = np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
        else:
            close = a == b
        if not np.all(close):
            bad = np.argwhere(~close)[:3].tolist()
            return (f"output {index}: {int(np.sum(~close))} of {a.size} values differ, e.g. at {bad}: "
                    f"{[a[tuple(i)].item() for i in bad]} vs onnxruntime {[b[tuple(i)].item() for i in bad]}")
    return ""


def run_case(model_bytes: bytes, seed: int, channel) -> dict:
    """Run one case through tensorkiln and (when it succeeds) onnxruntime; a JSON-ready result."""
    result = _run_tensorkiln(model_bytes, seed, channel)
    if result["tk"] != "ok":
        return result
    ort_result = _run_onnxruntime(model_bytes, result.pop("inputs"), channel)
    outputs = result.pop("outputs")
    result.update({k: v for k, v in ort_result.items() if k != "ort_outputs"})
    if ort_result["ort"] == "ok":
        result["mismatch"] = compare(outputs, ort_result["ort_outputs"])
        result["nonfinite_only"] = _differs_only_where_nonfinite(outputs, ort_result["ort_outputs"])
    result.update(_model_facts(model_bytes))
    return result


def _differs_only_where_nonfinite(ours: list, theirs: list) -> bool:
    """Whether every differing value is NaN or inf on tensorkiln's side (same dtypes and shapes)."""
    for a, b in zip(ours, theirs):
        b = np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "f":
            differs = ~np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
            if np.any(differs & np.isfinite(a)):
                return False
        elif np.any(a != b):
            return False
    return True


def _model_facts(model_bytes: bytes) -> dict:
    """The opset domains the model imports, and whether a constant of it holds inf or NaN."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load_model_from_string(model_bytes)
    nonfinite = False
    for tensor in model.graph.initializer:
        array = numpy_helper.to_array(tensor)
        if array.dtype.kind == "f" and not np.all(np.isfinite(array)):
            nonfinite = True
    return {"domains": [entry.domain for entry in model.opset_import], "nonfinite_constants": nonfinite}


def main() -> None:
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the libraries' prints go to stderr, not into the protocol
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import tensorkiln as tk
    tk.runtime.set_num_threads(1)
    _send(channel, {"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        model_bytes = base64.b64decode(request["model"])
        _send(channel, {"result": run_case(model_bytes, int(request["input_seed"]), channel)})


if __name__ == "__main__":
    main()
