"""Schedules the cuda tests share (imported by name: every conftest.py is a module called conftest)."""
from __future__ import annotations

import os
import subprocess

import pytest

from tensorkiln import te
from tensorkiln_cuda.nvrtc import include_dirs


def bind_1d(s, tensor, threads: int):
    """Fuse the axes of `tensor`, split by `threads`, bind blockIdx.x / threadIdx.x."""
    stage = s[tensor]
    axes = list(stage.op.axis)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    outer, inner = stage.split(fused, factor=threads)
    stage.bind(outer, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))
    return outer, inner


def sass(cubin: bytes, tmp_path) -> str:
    tools = [os.path.join(os.path.dirname(d), "bin") for d in include_dirs()]
    tools = [t for t in tools if os.path.exists(os.path.join(t, "cuobjdump")) and os.path.exists(os.path.join(t, "nvdisasm"))]
    if not tools:
        pytest.skip("cuobjdump and nvdisasm (nvidia-cuda-cuobjdump / -nvdisasm wheels) are not installed")
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    env = {**os.environ, "PATH": f"{tools[0]}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run([os.path.join(tools[0], "cuobjdump"), "-sass", str(path)], capture_output=True,
                          text=True, env=env, check=True).stdout
