"""ONNX backend node tests, generated in-process, run through a pluggable executor.

    python -m tensorkiln.node_tests            # reference interpreter, prints counts
    python -m tensorkiln.node_tests -v         # also lists failures
    python -m tensorkiln.node_tests --target cpu_llvm   # through tensorkiln.onnx_backend
    python -m tensorkiln.node_tests --target cpu_llvm --standard   # onnx's protocol only
    python -m tensorkiln.node_tests --target cpu_llvm --jobs 2     # cases shared by 2 processes

Two protocols drive a backend. The project's runner ("runner") passes each case's input
shapes and, when an import needs a shape-like input (axes, pads, sizes) as a constant, binds
the integer inputs with `constants=`. The standard protocol ("standard") is what onnx's
own harness and a user do: `backend.prepare(model)` and `rep.run(list_of_inputs)`, with
nothing bound; it is the figure to report.

`run_node_tests(run_fn)` imports each test model with `from_onnx` and calls
`run_fn(module, inputs) -> list of arrays`; another executor (a compiled target)
plugs in the same way. Each case ends as "pass", "fail" (wrong numbers or a
crash) or "unsupported" (the frontend or the target raised UnsupportedOpError,
or a dtype tensorkiln does not have).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import time
import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from .ir.errors import DTypeError, InternalError, TensorkilnError, UnsupportedOpError

__all__ = ["NodeCase", "NodeResult", "node_cases", "run_node_tests", "run_node_tests_in_processes", "reference_run",
           "summarize"]


@dataclass
class NodeCase:
    name: str
    model: Any
    inputs: dict[str, np.ndarray]
    expected_outputs: list[np.ndarray]
    is_float32_only: bool
    rtol: float
    atol: float


@dataclass
class NodeResult:
    name: str
    status: str  # "pass", "fail" or "unsupported"
    is_float32_only: bool
    detail: str = ""


def node_cases(op_type: str | None = None) -> Iterator[NodeCase]:
    """Yield one NodeCase per (ONNX node test, data set) from onnx.backend.test.case.node."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.node import collect_testcases
    # collect_testcases keeps global state, so filter here rather than through its argument.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    for case in cases:
        model = case.model
        if op_type is not None and all(n.op_type != op_type for n in model.graph.node):
            continue
        init_names = {t.name for t in model.graph.initializer}
        input_names = [i.name for i in model.graph.input if i.name not in init_names]
        for index, (inputs, outputs) in enumerate(case.data_sets):
            arrays_in = [_to_array(v, numpy_helper) for v in inputs]
            arrays_out = [_to_array(v, numpy_helper) for v in outputs]
            name = case.name if len(case.data_sets) == 1 else f"{case.name}[{index}]"
            yield NodeCase(name, model, dict(zip(input_names, arrays_in)), arrays_out,
                           _is_float32_only(arrays_in, arrays_out), case.rtol, case.atol)


def _to_array(value: Any, numpy_helper) -> Any:
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    if hasattr(value, "dims") and hasattr(value, "data_type"):
        return numpy_helper.to_array(value)
    if isinstance(value, list):   # a sequence: a list of tensors
        return [_to_array(item, numpy_helper) for item in value]
    return value  # None (an empty optional) stays None


def _is_float32_only(inputs, outputs) -> bool:
    return all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in [*inputs, *outputs])


def reference_run(module, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The default executor: the graph's numpy reference interpreter."""
    from .graph.interpreter import evaluate
    from .ir.narrow_dtypes import to_carrier
    # float8/int4/... inputs enter the graph as their carrier (ir/narrow_dtypes.py), as onnx_backend passes them
    result = evaluate(module, {name: to_carrier(array) for name, array in inputs.items()})
    return result if isinstance(result, list) else [result]


def run_node_tests(run_fn: Callable[[Any, dict[str, np.ndarray]], list[np.ndarray]] = reference_run,
                   op_type: str | None = None, name_filter: Callable[[str], bool] | None = None,
                   backend: Any = None, protocol: str = "runner") -> list[NodeResult]:
    """Import, run and compare every node test case; return one NodeResult per case.

    With `backend` (an onnx.backend.base.Backend such as `tensorkiln.onnx_backend.backend_for(target)`)
    each case goes through `backend.prepare(model, shape=..., constants=...)` and `rep.run(inputs)`
    instead of `from_onnx` and `run_fn`. With `protocol="standard"` (needs `backend`) each case
    goes through `backend.prepare(model)` and `rep.run([inputs in graph order])` with nothing bound.
    """
    from .frontend.onnx import from_onnx
    if protocol not in ("runner", "standard"):
        raise ValueError(f"protocol must be 'runner' or 'standard', got {protocol!r}")
    if protocol == "standard" and backend is None:
        raise ValueError("protocol='standard' drives a backend: pass backend=")
    importer = from_onnx
    if protocol == "standard":
        cases = (c for c in node_cases(op_type) if name_filter is None or name_filter(c.name))
        return [_run_standard_case(case, backend) for case in cases]
    if backend is not None:
        def importer(model, shape, constants=None):
            return backend.prepare(model, shape=shape, constants=constants)

        def run_fn(rep, inputs):
            return list(rep.run(inputs))
    results = []
    for case in node_cases(op_type):
        if name_filter is not None and not name_filter(case.name):
            continue
        results.append(_run_case(case, run_fn, importer))
    return results


def run_node_tests_in_processes(target: str, protocol: str = "runner", jobs: int = 2,
                                name_contains: str | None = None, sample: int = 1) -> list[NodeResult]:
    """`run_node_tests` through `backend_for(target)`, the cases shared by `jobs` fresh processes (by a hash
    of their names), in node_cases' order. Each case compiles and runs alone, so on N cores N processes
    take about 1/N of the time; a process that dies (a crash in native code) fails the whole run.
    `sample` > 1 runs one case in `sample`, a fixed choice by another hash of the name (`in_sample`)."""
    if jobs <= 1:
        from .onnx_backend import backend_for
        return run_node_tests(backend=backend_for(target), protocol=protocol,
                              name_filter=lambda name: _selected(name, name_contains, sample))
    # spawn: a forked child would inherit the parent's thread pool and LLVM state mid-use
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        shards = [pool.submit(_run_shard, target, protocol, shard, jobs, name_contains, sample)
                  for shard in range(jobs)]
        results = [result for future in shards for result in future.result()]
    order = {case.name: index for index, case in enumerate(node_cases())}
    return sorted(results, key=lambda result: order.get(result.name, len(order)))


def _in_shard(name: str, shard: int, jobs: int) -> bool:
    return zlib.crc32(name.encode()) % jobs == shard


def in_sample(name: str, sample: int) -> bool:
    """Whether a case is in the fixed one-in-`sample` subset (a hash independent of the shards')."""
    return sample <= 1 or zlib.adler32(name.encode()) % sample == 0


def _selected(name: str, name_contains: str | None, sample: int) -> bool:
    return (name_contains is None or name_contains in name) and in_sample(name, sample)


def _run_shard(target: str, protocol: str, shard: int, jobs: int, name_contains: str | None,
               sample: int = 1) -> list[NodeResult]:
    from .onnx_backend import backend_for
    def chosen(name: str) -> bool:
        return _in_shard(name, shard, jobs) and _selected(name, name_contains, sample)
    return run_node_tests(backend=backend_for(target), protocol=protocol, name_filter=chosen)


def _run_case(case: NodeCase, run_fn, from_onnx, retry: bool = True) -> NodeResult:
    def result(status: str, detail: str = "") -> NodeResult:
        return NodeResult(case.name, status, case.is_float32_only, detail)

    if not all(isinstance(v, np.ndarray) for v in case.inputs.values()) or not all(
            value.type.HasField("tensor_type") for value in case.model.graph.input):
        retry = False   # a sequence or optional input (even one holding a tensor) has no shape to bind
    try:
        module, inputs = _import(case, from_onnx) if retry else (from_onnx(case.model, shape=None), case.inputs)
        outputs = run_fn(module, inputs)
    except (UnsupportedOpError, DTypeError) as error:
        return result("unsupported", f"{type(error).__name__}: {_first_line(error)}")
    except (TensorkilnError, InternalError) as error:
        return result("fail", f"{type(error).__name__}: {_first_line(error)}")
    except Exception as error:  # an executor crash is a failure of that case, not of the run
        return result("fail", f"crash {type(error).__name__}: {_first_line(error)}")
    if len(outputs) != len(case.expected_outputs):
        return result("fail", f"{len(outputs)} outputs, expected {len(case.expected_outputs)}")
    for index, (actual, expected) in enumerate(zip(outputs, case.expected_outputs)):
        problem = _compare_value(actual, expected, case.rtol, case.atol)
        if problem:
            return result("fail", f"output {index}: {problem}")
    return result("pass")


def _run_standard_case(case: NodeCase, backend) -> NodeResult:
    """prepare(model) then run(list): the model's own declared shapes, no constants, no retries."""
    def prepare(model, shape=None, constants=None):
        return backend.prepare(model)

    def run(rep, inputs):
        return list(rep.run(list(inputs.values())))

    return _run_case(case, run, prepare, retry=False)


def _import(case: NodeCase, from_onnx):
    """Import the case's model; when a shape-like parameter (axes, pads, sizes, ...) arrives
    as a graph input, retry with the integer inputs bound as constants."""
    shapes = {k: v.shape for k, v in case.inputs.items()}
    try:
        return from_onnx(case.model, shape=shapes), case.inputs
    except UnsupportedOpError as error:
        if "known at import time" not in str(error):
            raise
    names = list(case.inputs)
    attempts = ([k for k in names if case.inputs[k].dtype.kind in "iu"], names[1:])
    for attempt, frozen_names in enumerate(attempts):
        frozen = {k: case.inputs[k] for k in frozen_names}
        rest = {k: v for k, v in case.inputs.items() if k not in frozen}
        try:
            module = from_onnx(case.model, shape={k: v.shape for k, v in rest.items()}, constants=frozen)
        except UnsupportedOpError as error:
            if attempt == len(attempts) - 1 or "known at import time" not in str(error):
                raise
            continue
        return module, rest
    raise AssertionError("unreachable")


def _compare_value(actual: Any, expected: Any, rtol: float, atol: float) -> str:
    """Compare an output with onnx's expected value: None (an empty optional) with None, a sequence
    (list) element by element, a tensor with _compare."""
    if expected is None:
        return "" if actual is None else f"a {type(actual).__name__}, expected None (an empty optional)"
    if actual is None:
        return "None, expected a value"
    if isinstance(expected, list):
        if not isinstance(actual, (list, tuple)):
            return f"a {type(actual).__name__}, expected a sequence of {len(expected)}"
        if len(actual) != len(expected):
            return f"a sequence of {len(actual)}, expected {len(expected)}"
        for index, (item, wanted) in enumerate(zip(actual, expected)):
            problem = _compare_value(item, wanted, rtol, atol)
            if problem:
                return f"element {index}: {problem}"
        return ""
    if isinstance(actual, (list, tuple)):
        return f"a sequence of {len(actual)}, expected a tensor"
    return _compare(np.asarray(actual), np.asarray(expected), rtol, atol)


def _compare(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> str:
    from .ir.narrow_dtypes import format_of_numpy, from_carrier
    narrow = format_of_numpy(expected.dtype)
    if narrow is not None and actual.dtype == np.dtype(narrow.carrier):   # the reference run returns carriers
        actual = from_carrier(actual, narrow.name)
    if actual.shape != expected.shape:
        return f"shape {actual.shape}, expected {expected.shape}"
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.name == "bfloat16":   # as onnx's own runner: float32 allclose, rtol of two bfloat16 ulps
        actual, expected, rtol = actual.astype(np.float32), expected.astype(np.float32), max(rtol, 2 ** -6)
    if expected.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
        except AssertionError as error:
            return _first_line(error, 3)
        return ""
    # ml_dtypes floats (float8, float4, bfloat16: numpy kind "V") hold NaNs, which compare equal here
    is_narrow_float = expected.dtype.kind == "V" and "float" in expected.dtype.name
    return "" if np.array_equal(actual, expected, equal_nan=is_narrow_float) else "values differ"


def _first_line(error: BaseException, lines: int = 1) -> str:
    text = " ".join(str(error).strip().splitlines()[:lines])
    return text[:300]


def summarize(results: list[NodeResult]) -> dict[str, dict[str, int]]:
    """Counts per status, for all cases and for the float32-only ones."""
    def count(items):
        return {s: sum(r.status == s for r in items) for s in ("pass", "fail", "unsupported")}
    return {"all": count(results), "float32_only": count([r for r in results if r.is_float32_only])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="list failing and unsupported cases")
    parser.add_argument("-k", default=None, help="only cases whose name contains this text")
    parser.add_argument("--target", default=None,
                        help="compile each case for this target through tensorkiln.onnx_backend "
                             "(default: the numpy reference interpreter)")
    parser.add_argument("--standard", action="store_true",
                        help="with --target: onnx's standard protocol (prepare(model), run(list)), "
                             "no shapes or constants bound")
    parser.add_argument("--jobs", type=int, default=1,
                        help="with --target: share the cases among this many processes (e.g. the core count)")
    args = parser.parse_args(argv)
    if args.standard and not args.target:
        parser.error("--standard needs --target")
    if args.jobs > 1 and not args.target:
        parser.error("--jobs needs --target")
    backend = None
    if args.target:
        from .onnx_backend import backend_for
        backend = backend_for(args.target)
    start = time.time()
    protocol = "standard" if args.standard else "runner"
    if args.jobs > 1:
        results = run_node_tests_in_processes(args.target, protocol, args.jobs, args.k)
    else:
        results = run_node_tests(name_filter=(lambda n: args.k in n) if args.k else None, backend=backend,
                                 protocol=protocol)
    if args.verbose:
        for item in results:
            if item.status != "pass":
                print(f"{item.status:12s} {item.name}: {item.detail}")
    for group, counts in summarize(results).items():
        total = sum(counts.values())
        print(f"{group:13s} pass {counts['pass']:4d}  fail {counts['fail']:4d}  "
              f"unsupported {counts['unsupported']:4d}  (of {total}; {100 * counts['pass'] / max(total, 1):.1f}% pass)")
    where = f"on {backend.target} through tensorkiln.onnx_backend" if backend else "with the reference interpreter"
    if args.standard:
        where += " (standard protocol: prepare(model), run(list), nothing bound)"
    print(f"took {time.time() - start:.1f} s {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
