"""host.py: The LLVM target machine for a cpu_llvm Target: CPU name, features, optimisation level."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.binding as llvm
from tensorkiln.sdk.native import host_cpu_features

__all__ = ["MachineConfig", "enabled_features", "code_features", "host_fingerprint", "machine_config", "target_machine", "new_target_machine", "host_features", "has_avx512",
           "CpuFacts", "cpu_facts", "refine_capabilities", "CacheSizes", "cache_sizes", "parse_size"]


@functools.cache
def _initialise() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()


def host_features() -> frozenset[str]:
    """Enabled features of the host CPU, e.g. {"avx2", "fma", "avx512f"} (the SDK's reading, which the loader
    checks code against)."""
    return host_cpu_features()


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
    tuned_from: str = ""   # the host CPU a stand-in model replaced (_TUNING_STAND_INS), else ""


@functools.cache
def _host_cpu() -> tuple[str, str]:
    """(name, features) of the host CPU, asked of LLVM once (about 0.3 ms a call; resnet50's compile asked 250 times)."""
    _initialise()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


_TUNING_STAND_INS = {"znver1": "haswell"}
"""Host CPUs whose own LLVM tuning (scheduling model) made slower code than a CPU of the same vector ISA: with
-mcpu=native, code for them is scheduled for the stand-in, while the host's feature string (every feature,
+ or -) still fixes the instruction set. An explicit -mcpu keeps its own model. Measured on an AMD EPYC
(Zen 1, KVM guest, 2 vCPUs), light models at 1 thread, one process alternating: vgg19 606 ms with znver1's
model, 434 with haswell's (its Winograd convs 30-45% faster each); resnet50 201 -> 189 ms (znver3's model 185,
x86-64-v3's 192). The whole-GEMM kernels (hand-vectorized) ran the same with either."""


def machine_config(target) -> MachineConfig:
    """Read -mcpu, -mattr, -opt_level and -num_threads of a resolved cpu_llvm Target."""
    _initialise()
    options = target.options
    cpu = options.get("mcpu", "native")
    features = []
    tuned_from = ""
    if cpu in ("native", "host", ""):
        cpu, host = _host_cpu()
        if cpu in _TUNING_STAND_INS:
            cpu, tuned_from = _TUNING_STAND_INS[cpu], cpu
        features.append(host)
    if options.get("mattr"):
        features.append(options["mattr"])
    return MachineConfig(triple=llvm.get_process_triple(), cpu=cpu, features=",".join(f for f in features if f),
                         opt_level=int(options.get("opt_level", 3)), num_threads=int(options.get("num_threads", 0)),
                         tuned_from=tuned_from)


@functools.lru_cache(maxsize=16)
def target_machine(config: MachineConfig) -> llvm.TargetMachine:
    """A shared position-independent target machine for emitting (objects go into JIT and libraries alike)."""
    return new_target_machine(config)


def new_target_machine(config: MachineConfig) -> llvm.TargetMachine:
    """A fresh target machine; an MCJIT engine takes ownership of the one it is given."""
    _initialise()
    return llvm.Target.from_triple(config.triple).create_target_machine(
        cpu=config.cpu, features=config.features, opt=config.opt_level, reloc="pic", codemodel="default")


@dataclass(frozen=True)
class CpuFacts:
    """What schedules and micro-kernels need from the CPU a target compiles for.

    Read from the LLVM feature string of the target (the host's with -mcpu=native, else
    the named CPU's plus -mattr), so `-mcpu=haswell` on an AVX-512 host gets AVX2 facts.
    """

    vector_bits: int          # widest usable SIMD register: 512 (AVX-512F), 256 (AVX/AVX2), 128 (SSE/NEON)
    vector_registers: int     # architectural SIMD registers: 32 with AVX-512, else 16
    fma: bool
    fma512_pipes: int = 0     # 512-bit FMAs issued per cycle: 2 on _TWO_FMA512_CPUS, 1 on other AVX-512 cores
    fma256_pipes: int = 0     # 256-bit FMAs issued per cycle: 1 on _HALF_WIDTH_AVX_CPUS, else 2 (0 without AVX)

    def lanes(self, element_bits: int = 32) -> int:
        return max(1, self.vector_bits // element_bits)


_AVX512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake-client", "icelake-server",
                 "tigerlake", "rocketlake", "sapphirerapids", "emeraldrapids", "graniterapids", "diamondrapids",
                 "knl", "knm", "znver4", "znver5", "x86-64-v4")
_AVX2_CPUS = ("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake",
              "gracemont", "znver1", "znver2", "znver3", "bdver4", "x86-64-v3")
"""What a CPU named by -mcpu implies when -mattr does not say (llvmlite exposes no per-CPU feature list)."""


_TWO_FMA512_CPUS = ("skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids",
                    "emeraldrapids", "graniterapids", "diamondrapids")
"""Intel's server cores: two 512-bit FMA pipes (client AVX-512 cores have one; Zen 4 splits each 512-bit FMA
into two 256-bit halves). A host with AMX counts too, whatever LLVM names it: a KVM guest on a Sapphire Rapids
host showed CPU model 167, which LLVM calls "rocketlake" (a client core), and ran 135 GFLOP/s of 512-bit FMAs
on one core at 2.1 GHz: two pipes. Zen 5 has two full-width pipes too, but is left out until it is measured
with the wide register tile that gemm_blocking gives these cores: its 8x32 tile measured 0.95x numpy or better."""


_HALF_WIDTH_AVX_CPUS = ("znver1", "bdver1", "bdver2", "bdver3", "bdver4", "btver2")
"""Cores that split every 256-bit operation into two 128-bit halves: one 256-bit FMA per cycle, so eight
accumulators (FMA latency 5) keep them busy, where two full-width pipes need ten or more (gemm_blocking)."""


def _cpu_features(cpu: str) -> set[str]:
    if cpu in _AVX512_CPUS:
        return {"avx", "avx2", "fma", "avx512f"}
    if cpu in _AVX2_CPUS:
        return {"avx", "avx2", "fma"}
    if cpu.startswith(("sandybridge", "ivybridge", "bdver", "btver2")):
        return {"avx"}
    return {"sse2"} if cpu.startswith(("x86-64", "core", "nehalem", "westmere", "k8", "btver")) else set()


def enabled_features(cpu: str, features: str, implied=()) -> frozenset[str]:
    """LLVM features a (cpu, feature string) enables: what the CPU name implies (`_cpu_features` plus
    `implied`), then the string's "+f" / "-f" items in order (host features, then -mattr)."""
    enabled = _cpu_features(cpu) | set(implied)
    for item in features.split(","):
        item = item.strip()
        if item[:1] == "+":
            enabled.add(item[1:])
        elif item[:1] == "-":
            enabled.discard(item[1:])
    return frozenset(enabled)


_ISA_FEATURE_PREFIXES = ("sse", "ssse", "avx", "fma", "f16c", "amx", "bmi", "lzcnt", "popcnt", "movbe", "xop",
                         "neon", "sve", "fp16", "dotprod", "i8mm", "bf16")
"""Features whose instructions generated code may contain (vector ISAs and the bit-manipulation ones LLVM
uses in scalar code): a host without one of them cannot run the code. Others (sha, rdrnd, ...) are never
emitted for tensor code and are left out, so code compiled natively on one host still loads on a similar one."""


def code_features(config: MachineConfig) -> tuple[str, ...]:
    """The instruction-set features code compiled for `config` may use, sorted (sdk.native checks them against
    the CPU that runs the code)."""
    return tuple(sorted(f for f in enabled_features(config.cpu, config.features)
                        if f.startswith(_ISA_FEATURE_PREFIXES)))


@functools.lru_cache(maxsize=32)
def _facts_for(cpu: str, features: str, tuned_from: str = "") -> CpuFacts:
    """`tuned_from`: the host CPU whose scheduling model a stand-in replaced; its pipes are still its own."""
    enabled = enabled_features(cpu, features)
    if "avx512f" in enabled:
        bits, registers = 512, 32
    elif "avx" in enabled or "avx2" in enabled:
        bits, registers = 256, 16
    elif "neon" in enabled or "asimd" in enabled or llvm.get_process_triple().startswith(("aarch64", "arm64")):
        bits, registers = 128, 32            # AArch64: 32 128-bit vector registers
    else:
        bits, registers = 128, 16            # x86-64 guarantees SSE2 and 16 xmm registers
    pipes = 0 if bits < 512 else 2 if cpu in _TWO_FMA512_CPUS or "amx-tile" in enabled else 1
    pipes256 = 0 if bits < 256 else 1 if (tuned_from or cpu) in _HALF_WIDTH_AVX_CPUS else 2
    return CpuFacts(vector_bits=bits, vector_registers=registers, fma="fma" in enabled or "avx512f" in enabled,
                    fma512_pipes=pipes, fma256_pipes=pipes256)


@dataclass(frozen=True)
class CacheSizes:
    """Data cache sizes in bytes that GEMM blocking is derived from (per core for L1 and L2)."""

    l1d: int
    l2: int
    l3: int
    l1d_ways: int = 8
    line_bytes: int = 64   # the L1 data cache's line: what one prefetch instruction brings in
    l2_ways: int = 8

    @property
    def l2_way_bytes(self) -> int:
        """Bytes of one L2 way: addresses this far apart fall into the same L2 set (128 KB: 1 MB, 8 ways)."""
        return max(64, self.l2 // max(1, self.l2_ways))

    @property
    def l1d_way_bytes(self) -> int:
        """Bytes of one L1 way (sets x line): addresses this far apart fall into the same set (4 KB on x86)."""
        return max(64, self.l1d // max(1, self.l1d_ways))


DEFAULT_CACHES = CacheSizes(l1d=32 * 1024, l2=512 * 1024, l3=8 * 1024 * 1024, l1d_ways=8, l2_ways=8)
"""When the host does not say (no sysfs): common sizes of current x86 and Arm server cores."""
_CACHE_ROOT = "/sys/devices/system/cpu/cpu0/cache"


def parse_size(text: str) -> int:
    """Bytes of "48K", "1024K", "32M", "65536" (sysfs and target-option spelling)."""
    text = str(text).strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in "KMG" else text
    try:
        value = int(float(number) * scale)
    except ValueError:
        raise ValueError(f"cache size {text!r} is not a size such as 48K, 1M or 32768") from None
    if value <= 0:
        raise ValueError(f"cache size {text!r} must be positive")
    return value


@functools.cache
def _host_caches(root: str = _CACHE_ROOT) -> CacheSizes:
    """L1 data, L2 and L3 sizes of cpu0 from sysfs (Linux), else DEFAULT_CACHES."""
    import glob
    import os

    found, ways, line = {}, {1: DEFAULT_CACHES.l1d_ways, 2: DEFAULT_CACHES.l2_ways}, DEFAULT_CACHES.line_bytes
    for index in sorted(glob.glob(os.path.join(root, "index*"))):
        try:
            with open(os.path.join(index, "level")) as level, open(os.path.join(index, "type")) as kind, \
                    open(os.path.join(index, "size")) as size:
                level_text, kind_text, size_text = level.read().strip(), kind.read().strip(), size.read().strip()
        except OSError:
            continue
        if kind_text in ("Data", "Unified") and size_text:
            level_number = int(level_text)
            found.setdefault(level_number, parse_size(size_text))
            if level_number in (1, 2):
                try:
                    with open(os.path.join(index, "ways_of_associativity")) as associativity:
                        ways[level_number] = int(associativity.read().strip()) or ways[level_number]
                    if level_number == 1:
                        with open(os.path.join(index, "coherency_line_size")) as line_size:
                            line = int(line_size.read().strip()) or line
                except (OSError, ValueError):
                    pass
    return CacheSizes(l1d=found.get(1, DEFAULT_CACHES.l1d), l2=found.get(2, DEFAULT_CACHES.l2),
                      l3=found.get(3, found.get(2, DEFAULT_CACHES.l3)), l1d_ways=ways[1], line_bytes=line,
                      l2_ways=ways[2])


def cache_sizes(target) -> CacheSizes:
    """The host's caches, each overridable by a target option (-l1_cache=48K -l2_cache=1M -l3_cache=32M -l1_ways=12
    -l2_ways=16)."""
    from tensorkiln.ir.errors import TargetError

    host = _host_caches()
    sizes = {}
    for field, option in (("l1d", "l1_cache"), ("l2", "l2_cache"), ("l3", "l3_cache")):
        given = target.options.get(option)
        try:
            sizes[field] = parse_size(given) if given else getattr(host, field)
        except ValueError as error:
            raise TargetError(f"cpu_llvm option -{option}={given}: {error}") from None
    ways = {}
    for level, field in ((1, "l1d_ways"), (2, "l2_ways")):
        given = target.options.get(f"l{level}_ways")
        if given is not None and int(given) <= 0:
            raise TargetError(f"cpu_llvm option -l{level}_ways={given}: the L{level} associativity must be a "
                              "positive number of ways")
        ways[field] = int(given) if given else getattr(host, field)
    return CacheSizes(**sizes, **ways, line_bytes=host.line_bytes)


def cpu_facts(target) -> CpuFacts:
    """CpuFacts of a resolved cpu_llvm Target (its -mcpu and -mattr on this host)."""
    config = machine_config(target)
    return _facts_for(config.cpu, config.features, config.tuned_from)


def host_fingerprint(target) -> str:
    """What this plugin's strategies read from the host for `target` (TargetSpec.host_fingerprint): the
    resolved CPU and features, the facts drawn from them and the cache sizes (blocking, tile widths)."""
    return repr((machine_config(target), cpu_facts(target), cache_sizes(target)))


def refine_capabilities(target):
    """The manifest's capabilities with the vector width and register count of this target's CPU."""
    facts = cpu_facts(target)
    return target.spec.manifest.capabilities.model_copy(
        update={"vector_width_bits": facts.vector_bits, "vector_registers": facts.vector_registers})
