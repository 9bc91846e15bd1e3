"""Fixtures of the opencl plugin's tests: the resolved target, its emitter and its loader."""
from __future__ import annotations

import pytest

import tensorkiln as tk


@pytest.fixture(scope="session")
def opencl_target():
    return tk.target("opencl")


@pytest.fixture(scope="session")
def build_and_load(opencl_target):
    """emit + load: PrimFuncs -> OpenCLModule on the target's device."""
    def run(*funcs):
        artifact = opencl_target.spec.emitter.emit(list(funcs), opencl_target)
        return opencl_target.spec.loader.load(artifact, opencl_target)
    return run
