"""benchmarks/compile_time.py: cold compile time of the light models on cpu_llvm, per phase.

    python benchmarks/compile_time.py                          # resnet50, densenet121
    python benchmarks/compile_time.py --models light --repeat 3
    python benchmarks/compile_time.py --models densenet121 --jobs 1   # serial LLVM (TENSORKILN_COMPILE_JOBS)

"Cold" means no compile-cache hit: the caches are turned off (TENSORKILN_KERNEL_CACHE=0: the
lowering cache and cpu_llvm's kernel cache) before tensorkiln is imported, so every compile lowers,
optimises and emits every kernel. One model
(squeezenet) is compiled first and thrown away so plugin loading and first-use imports (tensorkiln
imports its submodules lazily) are not charged to the measured models; that first compile is
reported on its own line.

Per compile: wall seconds, this process's CPU seconds, and the CPU seconds of child processes
(LLVM optimisation of module chunks runs in workers, parallel_compile.py). Per phase, the
inclusive wall and CPU seconds of the driver's steps, found by wrapping the functions that
implement them (they nest: "lower groups" holds "te -> tir" and "loop passes"):

    frontend         ONNX -> graph.Module (frontend/onnx.py from_onnx)
    graph passes     passes, placement and fusion (driver._partition)
    lower groups     every distinct group -> PrimFunc (driver.lower_group; the emitter draws the groups
                     as it compiles, so this phase runs inside "emit", overlapping the workers' LLVM)
      te -> tir        schedule -> loop nest (te.schedule_ops.ScheduleLowering.build)
      loop passes      simplify, vectorize, unroll, ... (the PassTimingInstrument's tir times)
    emit             the plugin's emitter: LLVM IR, optimisation, object code
      llvm ir build    llvmlite IR of the kernels (emitter._build_module)
      llvm ir text     printing it (emitter._unoptimized_text)
      llvm parse       LLVM parsing the text (emitter._parse)
      llvm optimise    optimisation of the chunks (parallel_compile.optimize_chunks; the parent's
                       own share is its CPU, the workers' is "children cpu"). Since the chunks are
                       written and the parent's object emitted inside optimize_chunks, this phase
                       holds "llvm ir build", "llvm ir text" and "object code" of a chunked module
      object code      machine code (TargetMachine.emit_object), in this process
      link chunks      the chunks' optimised bitcode linked into one module (the artifact's IR)
      llvm verify      LLVM's module verifier (ModuleRef.verify), wherever it runs here
      optimized text   printing the optimised module (the artifact's source)
      merge objects    the chunks' objects merged into one (parallel_compile.merge_objects, ld -r)
    plan             execution plan and its schedule (compiler.plan.build_plan, schedule_plan)
    gc collections   Python's cyclic garbage collections, wherever they ran (gc.callbacks; counted in the
                     phases above too): compiler/gc_tuning.py holds them back while a compile runs

With --warm, each model is also compiled warm: in a new process whose compile caches (the lowering
cache, compiler/lowering_cache.py, and cpu_llvm's kernel cache) were filled by an earlier process
compiling the same models, in a temporary TENSORKILN_CACHE_DIR: what a script compiling a model it
compiled before pays. Its first compile (squeezenet, imports) is not counted either.

With --timeline, each model's chunks are listed too: which process optimised each one (the parent,
or a worker), when it started and ended (seconds from the start of "emit"), its kernels and its
pipeline (vectorized, full or light: emitter._pipeline_class). The processes should end together.

The targets (issue #11) are printed beside the totals: resnet50 <= 2 s, densenet121 <= 5 s.
Timings on a shared machine are noisy: the load average is printed with them.
"""
from __future__ import annotations

import argparse
import gc
import os
import json
import resource
import subprocess
import sys
import tempfile
import time

WARM_CHILD = "--warm-child"
if WARM_CHILD not in sys.argv:
    os.environ["TENSORKILN_KERNEL_CACHE"] = "0"   # before tensorkiln is imported: every compile is cold

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TARGETS = {"resnet50": 2.0, "densenet121": 5.0}
LIGHT_MODELS = ("resnet50", "squeezenet", "densenet121", "inception_v1", "inception_v2", "shufflenet",
                "bvlc_alexnet", "zfnet512", "vgg19")


class PhaseTimer:
    """Inclusive wall and CPU seconds of wrapped functions, by phase name (re-entrant calls count once)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._depth: dict[str, int] = {}

    def wrap(self, owner, attribute: str, phase: str) -> None:
        original = getattr(owner, attribute)
        timer = self

        def timed(*args, **kwargs):
            if timer._depth.get(phase):
                return original(*args, **kwargs)
            timer._depth[phase] = 1
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                timer._depth[phase] = 0
                timer.wall[phase] = timer.wall.get(phase, 0.0) + time.perf_counter() - wall
                timer.cpu[phase] = timer.cpu.get(phase, 0.0) + time.process_time() - cpu

        timed.__wrapped__ = original
        setattr(owner, attribute, timed)

    def reset(self) -> None:
        self.wall.clear()
        self.cpu.clear()


def instrument(timer: PhaseTimer) -> None:
    import llvmlite.binding as llvm

    from tensorkiln.compiler import driver, plan, schedule_plan
    from tensorkiln.frontend import onnx as onnx_frontend
    from tensorkiln.te import schedule_ops
    from tensorkiln_cpu_llvm import emitter, parallel_compile

    import tensorkiln.compiler.dynamic as dynamic   # noqa: F401  (from_onnx is imported inside compile_onnx)
    timer.wrap(onnx_frontend, "from_onnx", "frontend")
    timer.wrap(driver, "_partition", "graph passes")
    timer.wrap(driver, "lower_group", "lower groups")
    timer.wrap(schedule_ops.ScheduleLowering, "build", "  te -> tir")
    timer.wrap(emitter.LLVMEmitter, "emit", "emit")
    timer.wrap(emitter.LLVMEmitter, "emit_stream", "emit")
    timer.wrap(emitter.LLVMEmitter, "_build_module", "  llvm ir build")
    timer.wrap(emitter, "_unoptimized_text", "  llvm ir text")
    timer.wrap(emitter, "_parse", "  llvm parse")
    timer.wrap(emitter, "optimize_chunks", "  llvm optimise")
    timer.wrap(emitter, "optimize", "  llvm optimise")
    timer.wrap(llvm.TargetMachine, "emit_object", "  object code")
    timer.wrap(llvm, "parse_bitcode", "  link chunks")
    timer.wrap(llvm.ModuleRef, "link_in", "  link chunks")
    timer.wrap(llvm.ModuleRef, "verify", "  llvm verify")
    timer.wrap(llvm.ModuleRef, "__str__", "  optimized text")
    if hasattr(emitter, "merge_objects"):
        timer.wrap(emitter, "merge_objects", "  merge objects")
    timer.wrap(driver, "build_plan", "plan")
    timer.wrap(driver, "schedule_plan", "plan")
    del plan, schedule_plan, parallel_compile


PHASE_ORDER = ("frontend", "graph passes", "lower groups", "  te -> tir", "  loop passes", "emit", "  llvm ir build",
               "  llvm ir text", "  llvm parse", "  llvm optimise", "  object code", "  link chunks", "  llvm verify",
               "  optimized text", "  merge objects", "plan", "gc collections")


class GcTimer:
    """Wall and CPU seconds spent in Python's garbage collections (gc.callbacks)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0
        self._start = (0.0, 0.0)
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = (time.perf_counter(), time.process_time())
        else:
            self.wall += time.perf_counter() - self._start[0]
            self.cpu += time.process_time() - self._start[1]


_GC = GcTimer()


class ChunkTimeline:
    """When each chunk of a chunked module was optimised, and by which process (parallel_compile.py)."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, float, float, int, str, int]] = []   # who, start, end, kernels, pipeline, IR kB
        self._emit_start = 0.0

    def install(self) -> None:
        import re

        from tensorkiln_cpu_llvm import emitter, parallel_compile
        timeline = self

        def recording(function, who: str):
            def wrapper(*args, **kwargs):
                job = args[1] if who == "worker" else args[0]
                start = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    pipeline = "light" if job.light else "full" if getattr(job, "vectorize", True) else "vectorized"
                    timeline.chunks.append((who, start - timeline._emit_start, time.perf_counter() - timeline._emit_start,
                                            len(re.findall(r"^define i32 @", job.text, re.M)), pipeline,
                                            len(job.text) // 1000))
            return wrapper

        def emit_wrapper(function):
            def wrapper(*args, **kwargs):
                timeline._emit_start = time.perf_counter()
                return function(*args, **kwargs)
            return wrapper

        parallel_compile._exchange = recording(parallel_compile._exchange, "worker")
        parallel_compile.optimize_chunk = recording(parallel_compile.optimize_chunk, "parent")
        emitter.LLVMEmitter.emit_stream = emit_wrapper(emitter.LLVMEmitter.emit_stream)

    def report(self, chunks) -> None:
        if not chunks:
            print("  (no chunks: the module was optimised in one piece)")
            return
        print(f"  {'chunk by':<9} {'start s':>7} {'end s':>7} {'kernels':>7} {'IR kB':>6}  pipeline")
        for who, start, end, kernels, pipeline, size in sorted(chunks, key=lambda c: c[1]):
            print(f"  {who:<9} {start:7.2f} {end:7.2f} {kernels:7d} {size:6d}  {pipeline}")


_TIMELINE = ChunkTimeline()


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_once(name: str, timer: PhaseTimer, target: str) -> dict:
    import tensorkiln as tk
    from models import light_model

    model, _ = light_model(name)
    timer.reset()
    _GC.wall = _GC.cpu = 0.0
    _TIMELINE.chunks = []
    children = children_cpu()
    wall, cpu = time.perf_counter(), time.process_time()
    lib = tk.compile(model, target=target)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    phases = {p: (timer.wall.get(p, 0.0), timer.cpu.get(p, 0.0)) for p in PHASE_ORDER}
    loop = sum(v for k, v in lib.pass_times.items() if k in _loop_pass_names())
    phases["  loop passes"] = (loop, loop)
    phases["gc collections"] = (_GC.wall, _GC.cpu)
    return {"wall": wall, "cpu": cpu, "children": children_cpu() - children, "phases": phases,
            "kernels": sum(len(a.kernels) for a in lib.artifacts.values()), "chunks": _TIMELINE.chunks}


def _loop_pass_names() -> set[str]:
    from tensorkiln.tir.passes import LOOP_PASSES
    return set(LOOP_PASSES.passes())


def warm_child(names: list[str], target: str) -> None:
    """In a process with the caches on: compile squeezenet (imports), then each model; JSON times on stdout."""
    import tensorkiln as tk
    from models import light_model

    tk.compile(light_model("squeezenet")[0], target=target)
    times = {}
    for name in names:
        model, _ = light_model(name)
        children = children_cpu()
        wall, cpu = time.perf_counter(), time.process_time()
        tk.compile(model, target=target)
        times[name] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                       "children": children_cpu() - children}
    print(json.dumps(times))


def warm_compiles(names: list[str], target: str, repeat: int) -> None:
    """Compile `names` once in a process to fill an empty cache directory, then `repeat` times in new processes."""
    with tempfile.TemporaryDirectory(prefix="tensorkiln-warm-") as directory:
        env = {**os.environ, "TENSORKILN_CACHE_DIR": directory}
        env.pop("TENSORKILN_KERNEL_CACHE", None)
        env.pop("TENSORKILN_LOWERING_CACHE", None)
        command = [sys.executable, os.path.abspath(__file__), WARM_CHILD, ",".join(names), target]
        runs = []
        for _ in range(1 + max(1, repeat)):
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"warm compile failed:\n{done.stderr}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"\nwarm compiles (a new process, the compile caches filled by an earlier one; cold fill "
          + ", ".join(f"{name} {runs[0][name]['wall']:.2f} s" for name in names) + ")")
    for name in names:
        walls = [run[name] for run in runs[1:]]
        best = min(walls, key=lambda r: r["wall"])
        goal = TARGETS.get(name)
        verdict = "" if goal is None else f"  target <= {goal:.1f} s: {'met' if best['wall'] <= goal else 'NOT met'}"
        listing = ", ".join(f"{r['wall']:.2f}" for r in walls)
        print(f"{name}: wall {best['wall']:.2f} s, cpu {best['cpu']:.2f} s + children {best['children']:.2f} s"
              f"{verdict}  (walls {listing})")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [WARM_CHILD]:
        warm_child(argv[1].split(","), argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,densenet121",
                        help="comma-separated light model names, or 'light' for all nine")
    parser.add_argument("--repeat", type=int, default=1, help="compiles per model; the fastest wall time is reported")
    parser.add_argument("--jobs", type=int, default=None, help="TENSORKILN_COMPILE_JOBS (1: serial LLVM)")
    parser.add_argument("--target", default="cpu_llvm")
    parser.add_argument("--warm", action="store_true",
                        help="also compile each model warm: a new process with the caches an earlier one filled")
    parser.add_argument("--timeline", action="store_true",
                        help="list each chunk's process, start and end (from the start of emit), kernels and pipeline")
    args = parser.parse_args(argv)
    if args.jobs is not None:
        os.environ["TENSORKILN_COMPILE_JOBS"] = str(args.jobs)
    names = list(LIGHT_MODELS) if args.models == "light" else [m.strip() for m in args.models.split(",") if m.strip()]

    # tensorkiln imports its submodules lazily: the first compile pays for them and for plugin loading
    wall, cpu = time.perf_counter(), time.process_time()
    timer = PhaseTimer()
    instrument(timer)
    if args.timeline:
        _TIMELINE.install()
    compile_once("squeezenet", timer, args.target)
    print(f"imports, plugin loading and a first compile (squeezenet): wall {time.perf_counter() - wall:.2f} s, "
          f"cpu {time.process_time() - cpu:.2f} s")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs, "
          f"compile jobs {os.environ.get('TENSORKILN_COMPILE_JOBS', 'default')}, compile caches off")
    for name in names:
        runs = [compile_once(name, timer, args.target) for _ in range(max(1, args.repeat))]
        best = min(runs, key=lambda r: r["wall"])
        goal = TARGETS.get(name)
        verdict = "" if goal is None else f"  target <= {goal:.1f} s: {'met' if best['wall'] <= goal else 'NOT met'}"
        print(f"\n{name}: {best['kernels']} kernels, wall {best['wall']:.2f} s, cpu {best['cpu']:.2f} s "
              f"+ children {best['children']:.2f} s{verdict}")
        if len(runs) > 1:
            print("  walls: " + ", ".join(f"{r['wall']:.2f}" for r in runs))
        print(f"  {'phase':<18} {'wall s':>7} {'cpu s':>7}")
        for phase in PHASE_ORDER:
            w, c = best["phases"][phase]
            print(f"  {phase:<18} {w:7.2f} {c:7.2f}")
        if args.timeline:
            _TIMELINE.report(best["chunks"])
    if args.warm:
        warm_compiles(names, args.target, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
