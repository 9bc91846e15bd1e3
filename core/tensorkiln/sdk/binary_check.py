"""sdk/binary_check.py: check a native object or library image before anything loads it.

A loader that hands bytes from a model package to a JIT linker or to `dlopen` first
checks that they are an ELF image for this host: garbage or a truncated file must be
an error naming what is wrong, never a crash inside the linker.

    check_elf(artifact.binary, "cpu_llvm kernels of model.tkpkg")    # raises ArtifactError

Checked: the magic, 64-bit class and little endianness, the machine (x86-64 on an
x86-64 host, AArch64 on an AArch64 one), and that the section header table and every
section it describes lie inside the image.
"""
from __future__ import annotations

import platform
import struct

from ..ir.errors import ArtifactError

__all__ = ["check_elf", "host_elf_machine", "ELF_MACHINES"]

ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "riscv64": 243, "ppc64le": 21}
"""ELF e_machine of each host architecture name `platform.machine()` reports."""

_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")   # Elf64_Shdr
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")    # Elf64_Ehdr
_SHT_NOBITS = 8


def host_elf_machine() -> int | None:
    """The ELF machine code of this host (None when unknown)."""
    return ELF_MACHINES.get(platform.machine().lower())


def check_elf(image: bytes, what: str) -> None:
    """Raise ArtifactError (naming `what` and the problem) unless `image` is a sound ELF image for this host."""
    if len(image) < _HEADER.size or image[:4] != b"\x7fELF":
        raise ArtifactError(f"{what}: not an ELF object or library (bad magic); the package is damaged or "
                            "was not written by tensorkiln: export it again")
    ident, _type, machine, _version, _entry, _phoff, shoff, _flags, _ehsize, _phentsize, _phnum, shentsize, \
        shnum, _shstrndx = _HEADER.unpack_from(image)
    if ident[4] != 2 or ident[5] != 1:
        raise ArtifactError(f"{what}: a {'32' if ident[4] == 1 else '?'}-bit or big-endian ELF image; this host "
                            "loads 64-bit little-endian code only")
    expected = host_elf_machine()
    if expected is not None and machine != expected:
        names = {code: name for name, code in ELF_MACHINES.items()}
        raise ArtifactError(f"{what}: compiled for ELF machine {names.get(machine, machine)}, but this host is "
                            f"{platform.machine()}; compile the model on (or for) this architecture")
    if shnum and (shentsize != _SECTION_HEADER.size or shoff + shnum * shentsize > len(image)):
        raise ArtifactError(f"{what}: the section header table lies outside the {len(image)}-byte image "
                            "(truncated or damaged); export the model again")
    for index in range(shnum):
        fields = _SECTION_HEADER.unpack_from(image, shoff + index * shentsize)
        kind, offset, size = fields[1], fields[4], fields[5]
        if kind != _SHT_NOBITS and offset + size > len(image):
            raise ArtifactError(f"{what}: section {index} ({size} bytes at offset {offset}) lies outside the "
                                f"{len(image)}-byte image (truncated or damaged); export the model again")
