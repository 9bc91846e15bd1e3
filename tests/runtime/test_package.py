"""The model package (runtime/package.py): round trip, no pickle, and clear errors for damaged or foreign files."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.errors import ArtifactError
from tensorkiln.runtime import package

RNG = np.random.default_rng(0)
X = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)


@pytest.fixture(scope="module")
def lib():
    x = graph.var("input", shape=(1, 3, 8, 8), dtype="float32")
    w = graph.const(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = graph.const(RNG.standard_normal((4,)).astype(np.float32))
    y = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(x, w, padding=(1, 1, 1, 1)), b))
    return tk.compile(graph.Module.from_expr(graph.nn.global_avg_pool2d(y)), target="cpu_llvm")


@pytest.fixture(scope="module")
def exported(lib, tmp_path_factory):
    path = tmp_path_factory.mktemp("package") / "model.tkpkg"
    lib.export(path)
    return path


def _entries(path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _write(path, entries: dict[str, bytes], rehash: bool = True) -> None:
    entries = dict(entries)
    if rehash:
        entries.pop(package.HASH_ENTRY, None)
        signature = entries.pop(package.SIGNATURE_ENTRY, None)
        entries[package.HASH_ENTRY] = package._content_hash(entries).encode()
        if signature is not None:
            entries[package.SIGNATURE_ENTRY] = signature
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)


def _with_record(exported, tmp_path, edit) -> str:
    """A copy of the package whose JSON record `edit` changed, with a valid content hash again."""
    entries = _entries(exported)
    record = json.loads(entries[package.RECORD])
    edit(record)
    entries[package.RECORD] = json.dumps(record).encode()
    path = tmp_path / "edited.tkpkg"
    _write(path, entries)
    return str(path)


def test_round_trip_gives_equal_outputs(lib, exported):
    loaded = tk.runtime.load(exported)
    np.testing.assert_array_equal(loaded(X), lib(X))
    assert loaded.input_names == lib.input_names
    assert loaded.output_info() == lib.output_info()
    assert loaded.summary()["kernels"] == lib.summary()["kernels"]


def test_save_then_load_round_trips_and_runs(lib, exported, tmp_path):
    path = tmp_path / "saved.tkpkg"
    tk.runtime.save(lib, path)
    assert _entries(path) == _entries(exported)   # export is save
    loaded = tk.runtime.load(path)
    np.testing.assert_array_equal(loaded(X), lib(X))
    assert loaded.plan == lib.plan and isinstance(loaded.plan, tk.runtime.ExecutionPlan)


def test_loaded_package_exports_again_identically(exported, tmp_path):
    again = tmp_path / "again.tkpkg"
    tk.runtime.load(exported).export(again)
    assert _entries(again) == _entries(exported)


def test_package_holds_no_pickle(exported):
    entries = _entries(exported)
    names = sorted(entries)
    assert package.RECORD in names and package.HASH_ENTRY in names
    weights = [n for n in names if n.startswith("weights/")]
    assert weights, names
    for name in names:
        data = entries[name]
        # Only the documented kinds of entry; none is a pickle stream (protocol 2+ starts with 0x80).
        assert name in (package.RECORD, package.HASH_ENTRY) or name.startswith(("weights/", "kernels/")), name
        assert name.endswith((".json", ".npy", ".txt", ".bin", "/module.so")) or name == package.HASH_ENTRY, name
        assert not data.startswith(b"\x80"), f"{name} looks like a pickle"
        if name.endswith(".npy"):
            array = np.load(io.BytesIO(data), allow_pickle=False)
            assert array.dtype != object
    json.loads(entries[package.RECORD])


def test_modified_entry_is_a_content_hash_mismatch(exported, tmp_path):
    entries = _entries(exported)
    weight = next(n for n in entries if n.startswith("weights/"))
    array = np.load(io.BytesIO(entries[weight]), allow_pickle=False)
    buffer = io.BytesIO()
    np.save(buffer, array + 1, allow_pickle=False)
    entries[weight] = buffer.getvalue()
    path = tmp_path / "modified.tkpkg"
    _write(path, entries, rehash=False)
    with pytest.raises(ArtifactError, match=r"content hash mismatch: the file is corrupted or was modified"):
        tk.runtime.load(path)


def _entry_data_offsets(path) -> dict[str, int]:
    """Where each entry's (compressed) bytes start in the file."""
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    raw = open(path, "rb").read()
    offsets = {}
    for info in infos:
        start = info.header_offset
        name_len = int.from_bytes(raw[start + 26:start + 28], "little")
        extra_len = int.from_bytes(raw[start + 28:start + 30], "little")
        offsets[info.filename] = start + 30 + name_len + extra_len + info.compress_size // 2
    return offsets


def test_flipped_byte_in_any_entry_is_an_artifact_error(exported, tmp_path):
    raw = open(exported, "rb").read()
    for name, offset in _entry_data_offsets(exported).items():
        damaged = bytearray(raw)
        damaged[offset] ^= 0xFF
        path = tmp_path / "flipped.tkpkg"
        path.write_bytes(bytes(damaged))
        with pytest.raises(ArtifactError, match=r"corrupted"):
            tk.runtime.load(path)


def test_flipped_byte_anywhere_never_escapes_as_another_error(exported, tmp_path):
    raw = open(exported, "rb").read()
    path = tmp_path / "flipped.tkpkg"
    for offset in range(0, len(raw), max(1, len(raw) // 97)):
        damaged = bytearray(raw)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            tk.runtime.load(path)  # a byte nothing reads (a timestamp) may load fine
        except ArtifactError:
            pass


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.9, 0.999])
def test_truncated_file(exported, tmp_path, fraction):
    raw = open(exported, "rb").read()
    path = tmp_path / "truncated.tkpkg"
    path.write_bytes(raw[:int(len(raw) * fraction)])
    with pytest.raises(ArtifactError, match=r"is not a tensorkiln model package or is truncated/corrupted"):
        tk.runtime.load(path)


def test_not_a_zip(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"this is not a package" * 10)
    with pytest.raises(ArtifactError, match=r"model.onnx is not a tensorkiln model package"):
        tk.runtime.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(ArtifactError, match=r"no model package at .*absent.tkpkg"):
        tk.runtime.load(tmp_path / "absent.tkpkg")


def test_zip_without_record(tmp_path):
    path = tmp_path / "other.zip"
    _write(path, {"readme.txt": b"hello"}, rehash=False)
    with pytest.raises(ArtifactError, match=r"missing tensorkiln.json or CONTENT_HASH"):
        tk.runtime.load(path)


def test_record_that_is_not_json(exported, tmp_path):
    entries = _entries(exported)
    entries[package.RECORD] = b"{not json"
    path = tmp_path / "badjson.tkpkg"
    _write(path, entries)
    with pytest.raises(ArtifactError, match=r"tensorkiln.json is not valid JSON"):
        tk.runtime.load(path)


def test_other_format(exported, tmp_path):
    path = _with_record(exported, tmp_path, lambda r: r.update(format="someone-else"))
    with pytest.raises(ArtifactError, match=r"not a tensorkiln model package \(format 'someone-else'\)"):
        tk.runtime.load(path)


def test_format_version_mismatch(exported, tmp_path):
    path = _with_record(exported, tmp_path, lambda r: r.update(format_version=99))
    with pytest.raises(ArtifactError, match=rf"package format version 99 is not supported by tensorkiln "
                                            rf"{tk.__version__} \(reads version {package.FORMAT_VERSION}\)"):
        tk.runtime.load(path)


def test_core_version_mismatch(exported, tmp_path):
    path = _with_record(exported, tmp_path, lambda r: r.update(core_version="97.3.0"))
    with pytest.raises(ArtifactError, match=rf"compiled by tensorkiln 97.3.0, this is tensorkiln {tk.__version__}"):
        tk.runtime.load(path)


def _edit_target(**changes):
    def edit(record):
        for info in record["targets"].values():
            info.update(changes)
    return edit


def test_plugin_version_mismatch(exported, tmp_path):
    path = _with_record(exported, tmp_path, _edit_target(plugin_version="0.0.1-old"))
    with pytest.raises(ArtifactError, match=r"compiled with tensorkiln-cpu-llvm 0.0.1-old for .*llvm.*, "
                                            r"but .* is installed; recompile the model"):
        tk.runtime.load(path)


def test_manifest_hash_mismatch(exported, tmp_path):
    path = _with_record(exported, tmp_path, _edit_target(manifest_hash="0" * 64))
    with pytest.raises(ArtifactError, match=r"the manifest of plugin 'cpu_llvm' changed since the model was compiled "
                                            r"\(manifest hash differs\)"):
        tk.runtime.load(path)


def test_plugin_not_installed(exported, tmp_path):
    path = _with_record(exported, tmp_path, _edit_target(plugin="acme_npu", distribution="acme-npu"))
    with pytest.raises(ArtifactError, match=r"needs target plugin 'acme_npu' \(acme-npu .*\), which is not installed"):
        tk.runtime.load(path)


# ---- trust: sizes before reading, keyed signatures, libraries, kernel binaries --------------------------


def test_an_entry_larger_than_its_record_declares_is_refused_before_it_is_read(exported, tmp_path):
    """A zip bomb: the record says a few bytes, the stored entry decompresses to 200 MB."""
    entries = _entries(exported)
    weight = next(n for n in entries if n.startswith("weights/"))
    entries[weight] = bytes(200 << 20)
    path = tmp_path / "bomb.tkpkg"
    _write(path, entries)
    assert path.stat().st_size < 2 << 20          # compresses to almost nothing
    with pytest.raises(ArtifactError, match=rf"entry {weight} is stored as 209715200 bytes but the record declares"):
        tk.runtime.load(path)


def test_a_package_larger_than_max_bytes_is_refused(exported, tmp_path):
    with pytest.raises(ArtifactError, match=r"declares \d+ bytes of content, more than max_bytes=1000"):
        tk.runtime.load(exported, max_bytes=1000)


def test_an_undeclared_entry_is_refused(exported, tmp_path):
    entries = _entries(exported)
    entries["kernels/0/lib/0_evil.so"] = b"\x7fELF..."
    path = tmp_path / "extra.tkpkg"
    _write(path, entries)
    with pytest.raises(ArtifactError, match=r"entries \['kernels/0/lib/0_evil.so'\] are not declared"):
        tk.runtime.load(path)


def test_a_signed_package_loads_only_with_its_key(lib, tmp_path):
    path = tmp_path / "signed.tkpkg"
    tk.runtime.save(lib, path, key=b"secret")
    loaded = tk.runtime.load(path, key=b"secret")
    np.testing.assert_allclose(loaded(X), lib(X))
    with pytest.raises(ArtifactError, match=r"signature does not match this key"):
        tk.runtime.load(path, key=b"other")


def test_an_edited_package_with_a_recomputed_hash_is_refused_when_a_key_is_given(lib, tmp_path):
    """The unkeyed content hash only detects damage; a key detects tampering."""
    path = tmp_path / "signed.tkpkg"
    tk.runtime.save(lib, path, key=b"secret")
    entries = _entries(path)
    weight = next(n for n in entries if n.startswith("weights/"))
    array = np.load(io.BytesIO(entries[weight]), allow_pickle=False)
    buffer = io.BytesIO()
    np.save(buffer, array * 0, allow_pickle=False)
    entries[weight] = buffer.getvalue()
    tampered = tmp_path / "tampered.tkpkg"
    _write(tampered, entries)                      # content hash recomputed, signature kept
    tk.runtime.load(tampered)                      # without a key: the hash matches, nothing can tell
    with pytest.raises(ArtifactError, match=r"signature does not match this key"):
        tk.runtime.load(tampered, key=b"secret")
    unsigned = tmp_path / "unsigned.tkpkg"
    tk.runtime.save(lib, unsigned)
    with pytest.raises(ArtifactError, match=r"not signed, but a key was given"):
        tk.runtime.load(unsigned, key=b"secret")


def test_a_library_path_in_the_record_is_never_loaded(exported, tmp_path):
    def add_library(record):
        for info in record["artifacts"].values():
            info["metadata"]["libraries"] = ["/tmp/any/library.so"]
    path = _with_record(exported, tmp_path, add_library)
    with pytest.raises(ArtifactError, match=r"names libraries by path .* may only load libraries it contains"):
        tk.runtime.load(path)


def test_libraries_the_kernels_link_against_travel_inside_the_package(lib, tmp_path):
    """An ExternImpl's shared library is stored in the package and loaded from a private folder."""
    import copy
    import subprocess
    source = tmp_path / "helper.c"
    source.write_text("int tk_test_helper(void) { return 7; }\n")
    library = tmp_path / "libhelper.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    model = copy.copy(lib)
    model.artifacts = {t: dataclasses_replace(a, metadata={**a.metadata, "libraries": [str(library)]})
                       for t, a in lib.artifacts.items()}
    path = tmp_path / "with_lib.tkpkg"
    tk.runtime.save(model, path)
    names = _entries(path)
    stored = [n for n in names if "/lib/" in n]
    assert len(stored) == 1 and names[stored[0]] == library.read_bytes()
    assert str(tmp_path) not in names[package.RECORD].decode()              # no path on this disk in the record
    library.unlink()                                                        # only the package's copy exists now
    loaded = tk.runtime.load(path)
    (paths,) = [a.metadata["libraries"] for a in loaded.artifacts.values()]
    assert len(paths) == 1 and paths[0].startswith(package._library_folder())
    np.testing.assert_allclose(loaded(X), lib(X))


def test_a_garbage_kernel_binary_is_an_artifact_error_not_a_crash(exported, tmp_path):
    entries = _entries(exported)
    binary = next(n for n in entries if n.endswith("binary.bin"))
    entries[binary] = b"\x7fELF" + bytes(len(entries[binary]) - 4)
    path = tmp_path / "garbage.tkpkg"
    _write(path, entries)
    loaded = tk.runtime.load(path)
    with pytest.raises(ArtifactError, match=r"cpu_llvm object code .*(ELF|section)"):
        loaded(X)


def dataclasses_replace(obj, **changes):
    import dataclasses
    return dataclasses.replace(obj, **changes)
