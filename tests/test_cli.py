"""The `tensorkiln` console script."""
import json
import subprocess
import sys

import tensorkiln
from tensorkiln.cli import main


def test_version(capsys):
    try:
        main(["--version"])
    except SystemExit as stop:
        assert stop.code == 0
    assert tensorkiln.__version__ in capsys.readouterr().out


def test_targets_table_lists_in_tree_plugins(capsys):
    assert main(["targets"]) == 0
    out = capsys.readouterr().out
    for name in ("cpu_llvm", "opencl", "cuda", "fpga_hls"):
        assert name in out


def test_targets_json(capsys):
    assert main(["targets", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["core_version"] == tensorkiln.__version__
    rows = {row["target"]: row for row in data["targets"]}
    assert rows["fpga_hls"]["aliases"] == ["hls", "fpga"]
    assert rows["cuda"]["available"] is True and "CPU shim" in rows["cuda"]["availability_note"] or \
        "through the CUDA driver" in rows["cuda"]["availability_note"]
    assert rows["opencl"]["capabilities"]["max_threads_per_block"] > 0


def test_console_script_is_installed():
    out = subprocess.run([sys.executable, "-m", "tensorkiln.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and tensorkiln.__version__ in out.stdout
