"""The model package: one zip file holding kernels, plan and weights — and no pickle.

Layout:
    tensorkiln.json           compatibility record, plan, artifact descriptions
    weights/<value id>.npy    constants (numpy format, loaded with allow_pickle=False)
    kernels/<n>/source.txt    each target's kernel source; binary.bin when it has one
    CONTENT_HASH              sha256 over every other entry (name and bytes)

Loading reads data only: nothing in the file is executed as Python. The
compatibility record (format version, core version, each target's plugin and
version and manifest hash) is checked with a clear error naming what differs.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .. import __version__
from ..ir.errors import ArtifactError, TensorkilnError
from ..sdk.codegen import Artifact, KernelSignature, ParamSpec
from .plan import ExecutionPlan

__all__ = ["save", "load", "FORMAT_VERSION"]

FORMAT = "tensorkiln-model"
FORMAT_VERSION = 1
RECORD = "tensorkiln.json"
HASH_ENTRY = "CONTENT_HASH"


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


def save(model, path) -> None:
    """Write `model` (a CompiledModel, what tk.compile returns) to one package file at `path`.

        tk.runtime.save(lib, "model.tkpkg")      # same as lib.export("model.tkpkg")
        lib = tk.runtime.load("model.tkpkg")
    """
    entries: dict[str, bytes] = {}
    artifacts = {}
    targets = {}
    for index, (target_text, artifact) in enumerate(sorted(model.artifacts.items())):
        folder = f"kernels/{index}"
        entries[f"{folder}/source.txt"] = artifact.source.encode()
        if artifact.binary is not None:
            entries[f"{folder}/binary.bin"] = artifact.binary
        artifacts[target_text] = {
            "folder": folder, "target": artifact.target, "format": artifact.format,
            "kernels": [asdict(k) for k in artifact.kernels], "sources": artifact.sources,
            "metadata": artifact.metadata, "has_binary": artifact.binary is not None,
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
        "compile_seconds": model.compile_seconds,
    }
    try:
        text = json.dumps(record, indent=1, sort_keys=True)
    except TypeError as error:
        raise TensorkilnError(f"cannot export: an artifact holds data that is not JSON ({error}); "
                              "plugins must keep Artifact.metadata to plain data") from None
    entries[RECORD] = text.encode()
    entries[HASH_ENTRY] = _content_hash(entries).encode()
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(entries):
            archive.writestr(name, entries[name])


def _read_entries(path) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(path) as archive:
            return {info.filename: archive.read(info.filename) for info in archive.infolist()}
    except FileNotFoundError:
        raise ArtifactError(f"no model package at {path}") from None
    # A flipped byte inside a compressed entry surfaces as zlib.error, and one in a header as
    # NotImplementedError ("zip file version ...") or ValueError, not only as BadZipFile.
    except (zipfile.BadZipFile, EOFError, OSError, zipfile.LargeZipFile, zlib.error, NotImplementedError,
            ValueError) as error:
        raise ArtifactError(f"{path} is not a tensorkiln model package or is truncated/corrupted ({error}); "
                            "export it again with lib.export(path)") from None


def _check_compatible(record: dict, path) -> None:
    from ..sdk.plugin_manager import registry

    if record.get("format") != FORMAT:
        raise ArtifactError(f"{path}: not a tensorkiln model package (format {record.get('format')!r})")
    if record.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"{path}: package format version {record.get('format_version')} is not supported by "
                            f"tensorkiln {__version__} (reads version {FORMAT_VERSION}); recompile the model")
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


def load(path):
    """Load a model package written by `save` (or `CompiledModel.export`); returns a CompiledModel."""
    from ..sdk.plugin_manager import registry
    from .compiled_model import CompiledModel

    entries = _read_entries(path)
    if RECORD not in entries or HASH_ENTRY not in entries:
        raise ArtifactError(f"{path}: missing {RECORD} or {HASH_ENTRY}; not a complete tensorkiln model package")
    stored_hash = entries.pop(HASH_ENTRY).decode(errors="replace")
    if _content_hash(entries) != stored_hash:
        raise ArtifactError(f"{path}: content hash mismatch: the file is corrupted or was modified; export it again")
    try:
        record = json.loads(entries[RECORD])
    except ValueError as error:
        raise ArtifactError(f"{path}: {RECORD} is not valid JSON ({error})") from None
    _check_compatible(record, path)
    artifacts, target_objects = {}, {}
    for target_text, info in record["artifacts"].items():
        folder = info["folder"]
        kernels = tuple(KernelSignature(k["name"], tuple(ParamSpec(p["name"], p["kind"], p["dtype"], tuple(p["shape"]))
                                                         for p in k["params"])) for k in info["kernels"])
        artifacts[target_text] = Artifact(
            target=info["target"], format=info["format"], source=entries[f"{folder}/source.txt"].decode(),
            kernels=kernels, binary=entries.get(f"{folder}/binary.bin") if info["has_binary"] else None,
            sources=info["sources"], metadata=info["metadata"])
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
                         skipped_passes=record.get("skipped_passes", {}))
