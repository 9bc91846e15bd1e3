"""benchmarks/ort_baseline.py: the onnxruntime session every benchmark compares against.

onnxruntime's intra-op pool keeps its threads spinning for a while after `run` returns, waiting
for the next request. In a benchmark that alternates onnxruntime and tensorkiln in one process,
those spinning threads take the cores tensorkiln's parallel loops need: on the 2-core host,
resnet50 at 2 threads measured 57 ms interleaved against 30 ms alone, and squeezenet 9.7 ms
against 3.6 ms. `session.force_spinning_stop` ends the spinning when `run` returns (it restarts on
the next `run`, so onnxruntime's own time is unchanged: 20.4-25.9 ms without, 20.9-21.2 ms with, in
the same experiment). tensorkiln's libgomp team likewise stops spinning soon (GOMP_SPINCOUNT, see
tensorkiln_cpu_llvm/runtime.py), so each side gets the cores when its turn comes.
"""
from __future__ import annotations

__all__ = ["ort_session"]


def ort_session(model, threads: int, profiling: bool = False):
    """An onnxruntime CPU session of `model` (ModelProto or serialized bytes) with `threads` intra-op
    threads, one inter-op thread, all graph optimisations, and no spinning between runs; `profiling`
    records every node's time (`session.end_profiling()` writes the JSON trace)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.enable_profiling = profiling
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
