"""conformance/scaffold.py: `tensorkiln new-plugin NAME` writes a plugin distribution that passes the kit.

The plugin is a plain-C target: `CSourceEmitter` for the code, and for the loader
`tensorkiln.sdk.native_c.build_native_module` (packed wrappers of the native ABI,
the system C compiler, ctypes). Installed with `pip install --no-deps
--no-build-isolation DIR`, it passes the kit as generated; a vendor then edits the
manifest, the emitter's data and the loader for their device.

The templates are the files in `scaffold_files/` (`$name`, `$package`, ... are
substituted); sdk_docs/examples/tk_plainc is this scaffold's output for
`scaffold_plugin("plainc", ..., package="tk_plainc")`, checked by a test.
"""
from __future__ import annotations

import re
from pathlib import Path
from string import Template

__all__ = ["scaffold_plugin", "scaffold_files"]

_TEMPLATES = Path(__file__).resolve().parent / "scaffold_files"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def scaffold_files(name: str, package: str | None = None) -> dict[str, str]:
    """{relative path: text} of the plugin distribution for target `name`."""
    if not _NAME.match(name):
        raise ValueError(f"plugin name {name!r} must be lower_snake_case (letters, digits, underscores), "
                         "e.g. 'my_npu'")
    package = package or f"tensorkiln_{name}"
    values = {"name": name, "package": package, "distribution": package.replace("_", "-"),
              "emitter_class": f"{_camel(name)}Emitter", "loader_class": f"{_camel(name)}Loader"}

    def render(template: str) -> str:
        return Template((_TEMPLATES / f"{template}.txt").read_text()).substitute(values)

    return {
        "pyproject.toml": render("pyproject.toml"),
        "README.md": render("README.md"),
        f"{package}/__init__.py": render("__init__.py"),
        f"{package}/manifest.toml": render("manifest.toml"),
        f"{package}/plugin.py": render("plugin.py"),
        f"{package}/target.py": render("target.py"),
        f"{package}/emitter.py": render("emitter.py"),
        f"{package}/runtime.py": render("runtime.py"),
        "tests/test_conformance.py": render("test_conformance.py"),
    }


def scaffold_plugin(name: str, directory: str | Path | None = None, package: str | None = None,
                    overwrite: bool = False) -> Path:
    """Write the distribution for target `name` into `directory` (default ./tensorkiln-NAME); returns it."""
    root = Path(directory or f"tensorkiln-{name.replace('_', '-')}")
    files = scaffold_files(name, package)
    if root.exists() and any(root.iterdir()) and not overwrite:
        raise FileExistsError(f"{root} exists and is not empty; choose another --dir")
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
