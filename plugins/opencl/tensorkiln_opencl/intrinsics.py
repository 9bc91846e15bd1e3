"""intrinsics.py: tensor intrinsics the opencl plugin registers for its own target.

`opencl_fma4` computes D[i] = A[i] * B[i] + C[i] for four contiguous floats with one
OpenCL vector fma; tensorize an inner loop of 4 with it. Pointers are `__global`, so
the tensorized stage must read and write global buffers (not cache_read copies).
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.sdk.intrinsic_impl import SourceImpl

__all__ = ["opencl_intrinsics"]

_FMA4 = """\
inline void tk_opencl_fma4(const __global float* a, const __global float* b, const __global float* c,
                           __global float* d, int accumulate) {
    float4 result = fma(vload4(0, a), vload4(0, b), vload4(0, c));
    vstore4(accumulate ? vload4(0, d) + result : result, 0, d);
}"""


def opencl_intrinsics(target) -> list:
    """The intrinsics of the opencl target (called by the tensorkiln_intrinsics hook)."""
    a = te.placeholder((4,), name="a")
    b = te.placeholder((4,), name="b")
    c = te.placeholder((4,), name="c")
    d = te.compute((4,), lambda i: a[i] * b[i] + c[i], name="d")
    fma4 = te.decl_tensor_intrin(d, "opencl_fma4", inputs=[a, b, c],
                                 implementations={"opencl": SourceImpl("opencl", _FMA4, "tk_opencl_fma4")})
    return [fma4]
