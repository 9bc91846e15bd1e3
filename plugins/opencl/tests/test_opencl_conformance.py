"""test_opencl_conformance.py: the opencl target passes the kit's manifest, runtime, te and intrinsics levels.

The ops and models levels need the graph compiler's default GPU schedules, which are
not part of this plugin yet.
"""
from __future__ import annotations

import pytest

from tensorkiln.conformance.catalogue import CheckFailure, KitOptions, catalogue

_LEVELS = ("manifest", "runtime", "te", "intrinsics")


def _checks():
    import tensorkiln as tk
    target = tk.target("opencl")
    return target, [c for c in catalogue(target, _LEVELS, KitOptions(shapes_per_op=1)) if not c.is_skipped]


_TARGET, _CHECKS = _checks()


@pytest.mark.parametrize("check", _CHECKS, ids=[c.id for c in _CHECKS])
def test_conformance_check_passes(check):
    try:
        check.run(_TARGET)
    except CheckFailure as failure:
        pytest.fail(f"{check.id} ({failure.kind}): {failure.message}")


def test_fma4_intrinsic_tensorizes_with_bound_threads():
    import numpy as np

    import tensorkiln as tk
    from tensorkiln import te

    (fma4,) = [i for i in tk.intrinsics("opencl") if i.name == "opencl_fma4"]
    n = 128
    A, B, C = (te.placeholder((n,), name=x) for x in "ABC")
    D = te.compute((n,), lambda i: A[i] * B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    outer, inner = s[D].split(D.op.axis[0], factor=4)
    bx, tx = s[D].split(outer, factor=16)
    s[D].bind(bx, te.thread_axis("blockIdx.x"))
    s[D].bind(tx, te.thread_axis("threadIdx.x"))
    s[D].tensorize(inner, fma4)
    f = tk.build(s, [A, B, C, D], target="opencl", name="fma")
    a, b, c = (np.random.default_rng(i).standard_normal(n).astype("float32") for i in range(3))
    d = np.zeros(n, "float32")
    f(a, b, c, d)
    np.testing.assert_allclose(d, a * b + c, rtol=1e-6, atol=1e-6)
