"""Fixtures of the cuda plugin's tests: the target on the CPU shim and its emitter."""
from __future__ import annotations

import pytest

import tensorkiln as tk


@pytest.fixture(scope="session")
def shim_target():
    return tk.target("cuda -device=cpu_shim")


@pytest.fixture(scope="session")
def emitter(shim_target):
    return shim_target.spec.emitter
