"""llvm_passes.py: What cpu_llvm does to a parsed LLVM module before code generation.

Linking the LLVM source of tensor intrinsics and running the optimisation pipeline.
It imports llvmlite only, because parallel_compile.py's worker processes run it too.
"""
from __future__ import annotations

import functools
import os
from typing import Callable, Mapping

import llvmlite.binding as llvm

__all__ = ["REMARKS_ENV", "optimize", "link_intrinsic_sources"]

REMARKS_ENV = "TENSORKILN_LLVM_REMARKS"
"""Set to a pass-name regex (e.g. "loop-vectorize", ".*") to have LLVM print its optimisation remarks,
missed and analysis, on stderr; unset (the default), compiles print nothing."""


@functools.cache
def _enable_remarks(passes: str) -> None:
    # LLVM's remark filters are process-wide command-line options: set once, on request only
    llvm.set_option("tensorkiln", f"-pass-remarks-missed={passes}")
    llvm.set_option("tensorkiln", f"-pass-remarks-analysis={passes}")


def optimize(module: llvm.ModuleRef, machine: llvm.TargetMachine, opt_level: int, light: bool = False,
             vectorize: bool = True) -> None:
    """Run the default new-pass-manager pipeline (O0-O3) with loop/SLP vectorization from O2.

    `light` (a module of copy and elementwise kernels only, see emitter.needs_full_pipeline): from
    O2, the O1 pipeline with loop and SLP vectorization and without unrolling. Such loops are
    vectorized all the same; what O3 and unrolling add to them is code size (densenet121's 54
    concatenation copies: 45 kB of IR each, 4.4 s of LLVM in all, against 2.1 s) and no speed
    (the light copies ran faster, its BN+ReLU kernels as fast).

    `vectorize` False (a module of explicitly vectorized kernels, emitter.explicitly_vectorized):
    no loop or SLP vectorization and no loop unrolling. Their loops hold vector code already, which
    the loop vectorizer leaves alone, and SLP found only pairs of index computations to pack (in one
    of the 183 such kernels of six light models, mostly convolutions; the others' objects were
    byte-identical). Their schedules unroll what they mean to unroll (the register tile) before
    LLVM sees them; LLVM's unrolling of the rest took a third of their optimisation time and a
    quarter of their code, and gained nothing: densenet121, resnet50, inception_v1/v2, squeezenet
    and vgg19 ran as fast or faster without it, natively and with -mcpu=haswell (within 4%).
    """
    if os.environ.get(REMARKS_ENV):
        _enable_remarks(os.environ[REMARKS_ENV])
    light = light and opt_level >= 2
    options = llvm.create_pipeline_tuning_options(speed_level=1 if light else opt_level)
    options.loop_vectorization = opt_level >= 2 and vectorize
    options.slp_vectorization = opt_level >= 2 and vectorize
    options.loop_unrolling = opt_level >= 2 and not light and vectorize
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


def _plain_parse(text: str, what: str) -> llvm.ModuleRef:
    parsed = llvm.parse_assembly(text)
    parsed.verify()
    return parsed


def link_intrinsic_sources(parsed: llvm.ModuleRef, sources: Mapping[str, str],
                           parse: Callable[[str, str], llvm.ModuleRef] = _plain_parse,
                           error: type[Exception] = ValueError) -> None:
    """Link each intrinsic's LLVM source into `parsed`, its function private to the module."""
    for symbol, code in sources.items():
        source = parse(code, f"the LLVM source of intrinsic function {symbol!r}")
        source.triple, source.data_layout = parsed.triple, parsed.data_layout
        parsed.link_in(source)
        function = parsed.get_function(symbol)
        if function.is_declaration:
            raise error(f"cpu_llvm: the LLVM source of an intrinsic does not define {symbol!r}, the "
                        "symbol its SourceImpl names")
        # private to this module: it may be inlined, and two modules never clash
        function.linkage = llvm.Linkage.internal
    parsed.verify()
