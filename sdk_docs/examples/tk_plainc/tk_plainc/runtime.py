"""PlaincLoader: build an Artifact's C source with the system C compiler and load it with ctypes.

`build_native_module` (tensorkiln.sdk.native_c) appends a packed wrapper per kernel,
`int32_t SYMBOL_packed(TKArg*, int32_t)` (the native ABI of tensorkiln.sdk.native), which
checks count, dtype, shape and strides before the kernel runs; builds the library in a
temporary folder it deletes once loaded; and returns a `NativeModule`, whose kernels check
their arguments in Python first (RuntimeLaunchError). See sdk_docs/native_abi.md.
"""
import os
import shutil

from tensorkiln.sdk import RuntimeLoader, build_native_module


class PlaincLoader(RuntimeLoader):
    """Host memory (numpy arrays) and kernels built by `cc` into a shared library."""

    compiler = os.environ.get("CC", "cc")
    flags = ("-O2", "-std=c99", "-shared", "-fPIC")   # for parallel loops: add "-fopenmp", pass num_threads

    def describe_device(self, target=None) -> str:
        return f"host CPU, kernels built with {shutil.which(self.compiler) or self.compiler}"

    def load(self, artifact, target=None):
        return build_native_module(artifact, compiler=self.compiler, flags=self.flags, label="plainc")
