"""host.py: The LLVM target machine for a cpu_llvm Target: CPU name, features, optimisation level."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm

__all__ = ["MachineConfig", "machine_config", "target_machine", "new_target_machine", "host_features", "has_avx512"]


@functools.cache
def _initialise() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


@functools.cache
def host_features() -> frozenset[str]:
    """Enabled features of the host CPU, e.g. {"avx2", "fma", "avx512f"}."""
    _initialise()
    return frozenset(name for name, enabled in llvm.get_host_cpu_features().items() if enabled)


def has_avx512() -> bool:
    return {"avx512f", "fma"} <= host_features()


@dataclass(frozen=True)
class MachineConfig:
    """What the emitter needs from target options: triple, cpu, features, opt level, threads."""

    triple: str
    cpu: str
    features: str
    opt_level: int
    num_threads: int


def machine_config(target) -> MachineConfig:
    """Read -mcpu, -mattr, -opt_level and -num_threads of a resolved cpu_llvm Target."""
    _initialise()
    options = target.options
    cpu = options.get("mcpu", "native")
    features = []
    if cpu in ("native", "host", ""):
        cpu = llvm.get_host_cpu_name()
        features.append(llvm.get_host_cpu_features().flatten())
    if options.get("mattr"):
        features.append(options["mattr"])
    return MachineConfig(triple=llvm.get_process_triple(), cpu=cpu, features=",".join(f for f in features if f),
                         opt_level=int(options.get("opt_level", 3)), num_threads=int(options.get("num_threads", 0)))


@functools.lru_cache(maxsize=16)
def target_machine(config: MachineConfig) -> llvm.TargetMachine:
    """A shared position-independent target machine for emitting (objects go into JIT and libraries alike)."""
    return new_target_machine(config)


def new_target_machine(config: MachineConfig) -> llvm.TargetMachine:
    """A fresh target machine; an MCJIT engine takes ownership of the one it is given."""
    _initialise()
    return llvm.Target.from_triple(config.triple).create_target_machine(
        cpu=config.cpu, features=config.features, opt=config.opt_level, reloc="pic", codemodel="default")
