"""The model package: one zip file holding kernels, plan and weights — and no pickle.

Layout:
    tensorkiln.json           compatibility record, plan, artifact descriptions, and the
                              size of every other entry
    weights/<value id>.npy    constants (numpy format, loaded with allow_pickle=False)
    kernels/<n>/source.txt    each target's kernel source; binary.bin when it has one
    kernels/<n>/lib/<name>    shared libraries the kernels link against (ExternImpl intrinsics)
    kernels/<n>/module.so     the kernels linked into a shared library, for targets whose loaded
                              module can `export_library` (cpu_llvm): what the deploy-only
                              runtime (runtime/deploy.py) loads without llvmlite or the plugin
    CONTENT_HASH              sha256 over every other entry (name and bytes)
    SIGNATURE                 optional: HMAC-SHA256 of CONTENT_HASH with the user's key

The trust model (sdk_docs/trust.md): a package runs native code, so loading one runs
code. `load` verifies, before any kernel or library reaches a loader:
- sizes: the record (itself at most MAX_RECORD_BYTES) declares every entry's size; an
  entry it does not declare, or whose stored size differs, is refused, and the total is
  capped by `max_bytes` — nothing is decompressed before these checks (zip bombs);
- integrity: the content hash over every entry. It detects damage, not tampering:
  anyone can recompute it. Tampering is detected only with a key: `save(..., key=k)`
  signs, `load(..., key=k)` refuses a package without a valid signature;
- libraries: only libraries stored in the package are loaded (written to a private
  folder); a library path in the record is refused;
- the kernel binary's format and architecture are checked by the target's loader
  (tensorkiln.sdk.check_elf for native code) before the linker sees it;
- compatibility: format version, core version, each target's plugin, version and
  manifest hash, with a clear error naming what differs.
Nothing in the file is executed as Python.
"""
from __future__ import annotations

import atexit
import hashlib
import hmac
import inspect
import io
import json
import os
import shutil
import tempfile
import zipfile
import zlib
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .. import __version__
from ..ir.errors import ArtifactError, TensorkilnError
from ..sdk.codegen import Artifact, KernelSignature, ParamSpec
from .plan import ExecutionPlan

__all__ = ["save", "load", "FORMAT_VERSION", "MAX_RECORD_BYTES", "DEFAULT_MAX_BYTES", "LIBRARIES_KEY"]

FORMAT = "tensorkiln-model"
FORMAT_VERSION = 2
RECORD = "tensorkiln.json"
HASH_ENTRY = "CONTENT_HASH"
SIGNATURE_ENTRY = "SIGNATURE"
MAX_RECORD_BYTES = 64 << 20
"""The record (plan, artifact descriptions) is read before anything is checked, so it is capped."""
DEFAULT_MAX_BYTES = 8 << 30
"""Default cap on a package's total uncompressed size; `load(path, max_bytes=...)` changes it."""
LIBRARIES_KEY = "libraries"
"""Artifact.metadata key listing shared libraries the kernels link against (paths at compile time);
a package stores their bytes and its loader sees paths into a private folder instead."""


def _content_hash(entries: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(entries):
        digest.update(name.encode())
        digest.update(len(entries[name]).to_bytes(8, "little"))
        digest.update(entries[name])
    return digest.hexdigest()


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    # reshape: np.ascontiguousarray turns a 0-d array into shape (1,)
    np.save(buffer, np.ascontiguousarray(array).reshape(np.shape(array)), allow_pickle=False)
    return buffer.getvalue()


def save(model, path, key: bytes | None = None) -> None:
    """Write `model` (a CompiledModel, what tk.compile returns) to one package file at `path`.

        tk.runtime.save(lib, "model.tkpkg")      # same as lib.export("model.tkpkg")
        lib = tk.runtime.load("model.tkpkg")
        tk.runtime.save(lib, "model.tkpkg", key=secret)   # signed: load(..., key=secret) checks it
    """
    if getattr(model, "host_programs", None):
        raise ArtifactError(f"this model has control flow ({', '.join(sorted(model.host_programs))}), whose "
                            "compiled bodies a package cannot hold yet; keep the CompiledModel in memory")
    entries: dict[str, bytes] = {}
    artifacts = {}
    targets = {}
    for index, (target_text, artifact) in enumerate(sorted(model.artifacts.items())):
        folder = f"kernels/{index}"
        entries[f"{folder}/source.txt"] = artifact.source.encode()
        if artifact.binary is not None:
            entries[f"{folder}/binary.bin"] = artifact.binary
        deployable = _linked_library(model, target_text)
        if deployable is not None:
            entries[f"{folder}/module.so"] = deployable
        libraries = []
        for number, library in enumerate(artifact.metadata.get(LIBRARIES_KEY, ())):
            name = f"{folder}/lib/{number}_{os.path.basename(library)}"
            try:
                entries[name] = Path(library).read_bytes()
            except OSError as error:
                raise ArtifactError(f"cannot export: the kernels of {target_text} link against {library}, "
                                    f"which cannot be read ({error})") from None
            libraries.append(name)
        metadata = {k: v for k, v in artifact.metadata.items() if k != LIBRARIES_KEY}
        artifacts[target_text] = {
            "folder": folder, "target": artifact.target, "format": artifact.format,
            "kernels": [asdict(k) for k in artifact.kernels], "sources": artifact.sources,
            "metadata": metadata, "has_binary": artifact.binary is not None, "libraries": libraries,
            "has_module": deployable is not None,
        }
        spec = model.target_objects[target_text].spec
        targets[target_text] = {"plugin": spec.name, "plugin_version": spec.manifest.plugin.version,
                                "distribution": spec.distribution, "manifest_hash": spec.manifest_hash}
    for value_id, array in model.constants.items():
        entries[f"weights/{value_id}.npy"] = _npy_bytes(array)
    record = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "core_version": __version__,
        "target": model.target, "targets": targets, "plan": model.plan.to_json(), "artifacts": artifacts,
        "ops_before_fusion": model.ops_before_fusion, "pass_times": model.pass_times,
        "skipped_passes": model.skipped_passes,
        "compile_seconds": model.compile_seconds, "strategies": getattr(model, "strategies", {}),
        "entries": {name: len(data) for name, data in sorted(entries.items())},
    }
    try:
        text = json.dumps(record, indent=1, sort_keys=True)
    except TypeError as error:
        raise TensorkilnError(f"cannot export: an artifact holds data that is not JSON ({error}); "
                              "plugins must keep Artifact.metadata to plain data") from None
    entries[RECORD] = text.encode()
    entries[HASH_ENTRY] = _content_hash(entries).encode()
    if key is not None:
        entries[SIGNATURE_ENTRY] = _signature(key, entries[HASH_ENTRY]).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            archive.writestr(name, entries[name])


def _linked_library(model, target_text: str) -> bytes | None:
    """The target's kernels as a shared library, when its loaded module can export one (else None)."""
    target = model.target_objects[target_text]
    if not getattr(target.capabilities, "export_library", False):
        return None
    module = model.loaded_module(target_text)
    if not hasattr(module, "export_library"):
        return None
    # the plan's native entry goes into the library too when the module can link it (deploy.py runs it)
    options = {}
    entry = getattr(model.executor, "native_entry", None)
    if entry is not None and model.plan.steps[0].target == target_text \
            and "plan_entry" in inspect.signature(module.export_library).parameters:
        options["plan_entry"] = entry.spec
    with tempfile.TemporaryDirectory(prefix="tensorkiln-export-") as scratch:
        library = os.path.join(scratch, "module.so")
        module.export_library(library, **options)
        return Path(library).read_bytes()


def _signature(key: bytes, content_hash: bytes) -> str:
    if isinstance(key, str):
        key = key.encode()
    return hmac.new(key, content_hash, hashlib.sha256).hexdigest()


_ZIP_ERRORS = (zipfile.BadZipFile, EOFError, OSError, zipfile.LargeZipFile, zlib.error, NotImplementedError,
               ValueError)
"""A flipped byte inside a compressed entry surfaces as zlib.error, and one in a header as
NotImplementedError ("zip file version ...") or ValueError, not only as BadZipFile."""


def _read(archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, path) -> bytes:
    """The entry's bytes, never more than `limit` (its declared size) even if its header lies."""
    with archive.open(info) as handle:
        data = handle.read(limit + 1)
    if len(data) != limit:
        raise ArtifactError(f"{path}: entry {info.filename} holds {'more' if len(data) > limit else 'fewer'} "
                            f"bytes than the {limit} its record declares; the package is damaged or was modified")
    return data


def _read_entries(path, max_bytes: int) -> tuple[dict[str, bytes], dict]:
    """(entries, record): the record first (capped), then each entry it declares, sizes checked before reading."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            if RECORD not in infos or HASH_ENTRY not in infos:
                raise ArtifactError(f"{path}: missing {RECORD} or {HASH_ENTRY}; not a complete tensorkiln model "
                                    "package")
            if infos[RECORD].file_size > MAX_RECORD_BYTES:
                raise ArtifactError(f"{path}: its record is {infos[RECORD].file_size} bytes, more than the "
                                    f"{MAX_RECORD_BYTES} a package may have; refusing to read it")
            raw_record = _read(archive, infos[RECORD], infos[RECORD].file_size, path)
            try:
                record = json.loads(raw_record)
            except ValueError as error:
                raise ArtifactError(f"{path}: {RECORD} is not valid JSON ({error})") from None
            if not isinstance(record, dict):
                raise ArtifactError(f"{path}: {RECORD} is not a package record (a JSON object)")
            _check_format(record, path)
            declared = record.get("entries")
            if not isinstance(declared, dict) or not all(isinstance(v, int) and v >= 0 for v in declared.values()):
                raise ArtifactError(f"{path}: {RECORD} does not declare its entries' sizes")
            total = sum(declared.values())
            if total > max_bytes:
                raise ArtifactError(f"{path}: declares {total} bytes of content, more than max_bytes={max_bytes}; "
                                    "pass a larger max_bytes to load it if you trust it")
            extra = sorted(set(infos) - set(declared) - {RECORD, HASH_ENTRY, SIGNATURE_ENTRY})
            missing = sorted(set(declared) - set(infos))
            if extra or missing:
                raise ArtifactError(f"{path}: entries {extra or missing} are {'not declared by' if extra else 'missing from'}"
                                    f" the package record; the package is damaged or was modified")
            for name, info in infos.items():
                if name in declared and info.file_size != declared[name]:
                    raise ArtifactError(f"{path}: entry {name} is stored as {info.file_size} bytes but the record "
                                        f"declares {declared[name]}; the package is damaged or was modified")
            entries = {name: _read(archive, infos[name], size, path) for name, size in declared.items()}
            entries[RECORD] = raw_record
            for name in (HASH_ENTRY, SIGNATURE_ENTRY):
                if name in infos:
                    entries[name] = _read(archive, infos[name], min(infos[name].file_size, 256), path)
            return entries, record
    except FileNotFoundError:
        raise ArtifactError(f"no model package at {path}") from None
    except _ZIP_ERRORS as error:
        raise ArtifactError(f"{path} is not a tensorkiln model package or is truncated/corrupted ({error}); "
                            "export it again with lib.export(path)") from None


def _check_format(record: dict, path) -> None:
    if record.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not a tensorkiln model package (format {record.get('format')!r})")
    if record.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{path}: package format version {record.get('format_version')} is not supported by "
                            f"tensorkiln {__version__} (reads version {FORMAT_VERSION}); recompile the model")


def _check_compatible(record: dict, path) -> None:
    from ..sdk.plugin_manager import registry

    _check_format(record, path)
    saved = str(record.get("core_version", "?"))
    if saved.split(".")[:2] != __version__.split(".")[:2]:
        raise ArtifactError(f"{path}: compiled by tensorkiln {saved}, this is tensorkiln {__version__}; "
                            "recompile the model with this version")
    reg = registry()
    for target_text, info in record["targets"].items():
        try:
            spec = reg.spec(info["plugin"])
        except TensorkilnError:
            raise ArtifactError(f"{path}: needs target plugin {info['plugin']!r} ({info['distribution']} "
                                f"{info['plugin_version']}), which is not installed") from None
        if spec.manifest.plugin.version != info["plugin_version"]:
            raise ArtifactError(f"{path}: compiled with {info['distribution']} {info['plugin_version']} for "
                                f"{target_text}, but {spec.manifest.plugin.version} is installed; recompile the model")
        if spec.manifest_hash != info["manifest_hash"]:
            raise ArtifactError(f"{path}: the manifest of plugin {info['plugin']!r} changed since the model was "
                                "compiled (manifest hash differs); recompile the model")


def load(path, key: bytes | None = None, max_bytes: int = DEFAULT_MAX_BYTES):
    """Load a model package written by `save` (or `CompiledModel.export`); returns a CompiledModel.

    `key`: the package must carry a valid signature made with it (see `save`), checked before
    any kernel or library is handed to a loader. `max_bytes` caps the package's uncompressed size.
    Every check and its error is described in the module docstring.
    """
    entries, record = _read_entries(path, max_bytes)
    stored_hash = entries.pop(HASH_ENTRY)
    signature = entries.pop(SIGNATURE_ENTRY, None)
    if _content_hash(entries) != stored_hash.decode(errors="replace"):
        raise ArtifactError(f"{path}: content hash mismatch: the file is corrupted or was modified; export it again")
    if key is not None:
        if signature is None:
            raise ArtifactError(f"{path}: the package is not signed, but a key was given; refusing to load it "
                                "(sign it with tk.runtime.save(lib, path, key=...))")
        if not hmac.compare_digest(signature.decode(errors="replace"), _signature(key, stored_hash)):
            raise ArtifactError(f"{path}: the signature does not match this key: the package was modified or "
                                "signed with another key; refusing to load it")
    try:
        return _build(record, entries, path)
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as error:
        raise ArtifactError(f"{path}: the package record is malformed ({type(error).__name__}: {error}); "
                            "export the model again") from None


def _library_folder() -> str:
    """A private folder (0700) for libraries extracted from packages, removed when the process exits."""
    global _LIBRARY_FOLDER
    if _LIBRARY_FOLDER is None:
        _LIBRARY_FOLDER = tempfile.mkdtemp(prefix="tensorkiln-libs-")
        atexit.register(shutil.rmtree, _LIBRARY_FOLDER, True)
    return _LIBRARY_FOLDER


_LIBRARY_FOLDER: str | None = None


def _extract_libraries(info: dict, entries: dict[str, bytes], path) -> list[str]:
    folder = info["folder"]
    if info["metadata"].get(LIBRARIES_KEY):
        raise ArtifactError(f"{path}: the record names libraries by path ({info['metadata'][LIBRARIES_KEY]}); "
                            "a package may only load libraries it contains")
    paths = []
    for name in info.get("libraries", ()):
        if not name.startswith(f"{folder}/lib/") or name not in entries or "/.." in name:
            raise ArtifactError(f"{path}: library {name!r} is not an entry of this package's kernels")
        digest = hashlib.sha256(entries[name]).hexdigest()[:16]
        target = os.path.join(_library_folder(), f"{digest}_{os.path.basename(name)}")
        if not os.path.exists(target):
            with open(target, "wb") as handle:
                handle.write(entries[name])
        paths.append(target)
    return paths


def _build(record: dict, entries: dict[str, bytes], path):
    from ..sdk.plugin_manager import registry
    from .compiled_model import CompiledModel

    _check_compatible(record, path)
    artifacts, target_objects = {}, {}
    for target_text, info in record["artifacts"].items():
        folder = info["folder"]
        kernels = tuple(KernelSignature(k["name"], tuple(ParamSpec(p["name"], p["kind"], p["dtype"], tuple(p["shape"]))
                                                         for p in k["params"])) for k in info["kernels"])
        metadata = dict(info["metadata"])
        libraries = _extract_libraries(info, entries, path)
        if libraries:
            metadata[LIBRARIES_KEY] = libraries
        artifacts[target_text] = Artifact(
            target=info["target"], format=info["format"], source=entries[f"{folder}/source.txt"].decode(),
            kernels=kernels, binary=entries.get(f"{folder}/binary.bin") if info["has_binary"] else None,
            sources=info["sources"], metadata=metadata)
        target_objects[target_text] = registry().target(target_text)
    constants = {}
    for name, data in entries.items():
        if name.startswith("weights/"):
            value_id = int(name.split("/")[1].split(".")[0])
            constants[value_id] = np.load(io.BytesIO(data), allow_pickle=False)
    return CompiledModel(plan=ExecutionPlan.from_json(record["plan"]), constants=constants, artifacts=artifacts,
                         target_objects=target_objects, target=record["target"],
                         ops_before_fusion=record.get("ops_before_fusion", 0),
                         pass_times=record.get("pass_times", {}), compile_seconds=record.get("compile_seconds", 0.0),
                         skipped_passes=record.get("skipped_passes", {}), strategies=record.get("strategies", {}))
