"""benchmarks/onnx_model_suites.py: onnx's model suites (pytorch-converted, pytorch-operator, simple)
through the standard backend protocol on tensorkiln, and on onnxruntime for comparison.

    python benchmarks/onnx_model_suites.py [--target cpu_llvm] [--suites pytorch-converted,pytorch-operator]
                                           [-v] [--no-onnxruntime]

Each case of onnx/backend/test/data/<suite>/ is a model.onnx with test_data_set_*/input_*.pb and
output_*.pb; `backend.prepare(model)` then `rep.run(inputs)`, nothing bound, as onnx's own
BackendTest runs them, compared at its tolerances (rtol 1e-3, atol 1e-7). Issue 18 asks that these
suites rise alongside the node tests; run the script on two checkouts to compare.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import time

import numpy as np
import onnx
import onnx.backend.test
from onnx import numpy_helper

DATA = os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")
RTOL, ATOL = 1e-3, 1e-7


def _load(path: str):
    tensor = onnx.TensorProto()
    with open(path, "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def cases(suite: str):
    for folder in sorted(glob.glob(os.path.join(DATA, suite, "*"))):
        model_path = os.path.join(folder, "model.onnx")
        if not os.path.isfile(model_path):
            continue
        sets = []
        for data in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
            inputs = [_load(p) for p in sorted(glob.glob(os.path.join(data, "input_*.pb")),
                                               key=lambda p: int(p.rsplit("_", 1)[1][:-3]))]
            outputs = [_load(p) for p in sorted(glob.glob(os.path.join(data, "output_*.pb")),
                                                key=lambda p: int(p.rsplit("_", 1)[1][:-3]))]
            sets.append((inputs, outputs))
        yield os.path.basename(folder), model_path, sets


def run_case(prepare, model_path: str, sets) -> tuple[str, str]:
    """("pass" | "fail" | "error", detail)."""
    try:
        rep = prepare(onnx.load(model_path))
        for inputs, expected in sets:
            actual = rep.run(inputs)
            if len(actual) != len(expected):
                return "fail", f"{len(actual)} outputs, expected {len(expected)}"
            for index, (got, want) in enumerate(zip(actual, expected)):
                np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL,
                                           err_msg=f"output {index}")
    except AssertionError as error:
        return "fail", str(error).strip().splitlines()[0]
    except Exception as error:  # noqa: BLE001 - an unsupported op or crash is this case's result
        return "error", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
    return "pass", ""


def _onnxruntime_prepare():
    import onnxruntime

    class Rep:
        def __init__(self, model):
            self.session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

        def run(self, inputs):
            names = [i.name for i in self.session.get_inputs()]
            return self.session.run(None, dict(zip(names, inputs)))
    return Rep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="cpu_llvm")
    parser.add_argument("--suites", default="pytorch-converted,pytorch-operator")
    parser.add_argument("--no-onnxruntime", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every case that does not pass")
    args = parser.parse_args()
    from tensorkiln.onnx_backend import backend_for
    sides = {"tensorkiln": backend_for(args.target).prepare}
    if not args.no_onnxruntime:
        sides["onnxruntime"] = _onnxruntime_prepare()
    start = time.perf_counter()
    for suite in args.suites.split(","):
        listed = list(cases(suite))
        for side, prepare in sides.items():
            results = [(name, *run_case(prepare, path, sets)) for name, path, sets in listed]
            passed = sum(status == "pass" for _, status, _ in results)
            print(f"{suite:18s} {side:11s} {passed:3d} / {len(results)} pass ({100 * passed / max(1, len(results)):.1f}%)")
            if args.verbose:
                for name, status, detail in results:
                    if status != "pass":
                        print(f"    {status:5s} {name}: {detail[:160]}")
    print(f"took {time.perf_counter() - start:.1f} s, tensorkiln target {args.target}", file=sys.stderr)


if __name__ == "__main__":
    main()
