"""Write throw-away plugin distributions (package + .dist-info) into a folder.

The folder, put on sys.path, is found by importlib.metadata exactly like a
pip-installed plugin, so tests exercise the real discovery path.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

MANIFEST = """\
[plugin]
name = "{target}"
aliases = {aliases}
version = "0.3.0"
sdk_api = "{sdk_api}"
device_kind = "accelerator"
available = false
unavailable_reason = "test plugin without code generator"

[capabilities]
dtypes = ["float32", "int8"]
vector_width_bits = 128
"""

PLUGIN = """\
from tensorkiln.sdk import hookimpl, TargetSpec, load_manifest

{extra}

@hookimpl
def tensorkiln_targets():
    return [TargetSpec(manifest=load_manifest(__file__))]
"""


def write_plugin(root: Path, package: str, target: str, *, sdk_api: str = ">=1.0,<2", aliases=(),
                 plugin_code: str | None = None, manifest: str | None = None, extra: str = "") -> Path:
    """Create `package` with an entry point `target` in group tensorkiln.plugins under `root`."""
    package_dir = root / package
    package_dir.mkdir(parents=True)
    (package_dir / "__init__.py").write_text("")
    (package_dir / "plugin.py").write_text(plugin_code if plugin_code is not None else PLUGIN.format(extra=extra))
    manifest_text = manifest if manifest is not None else MANIFEST.format(
        target=target, sdk_api=sdk_api, aliases=list(aliases)).replace("'", '"')
    (package_dir / "manifest.toml").write_text(manifest_text)
    dist = package.replace("_", "-")
    info = root / f"{package}-0.3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.3.0\n")
    (info / "entry_points.txt").write_text(f"[tensorkiln.plugins]\n{target} = {package}.plugin\n")
    files = [f"{package}/__init__.py", f"{package}/plugin.py", f"{package}/manifest.toml",
             f"{info.name}/METADATA", f"{info.name}/entry_points.txt", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return package_dir


def dedent(text: str) -> str:
    return textwrap.dedent(text)
