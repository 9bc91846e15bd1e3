"""conformance/pytest_plugin.py: the kit as pytest items.

    pytest --pyargs tensorkiln.conformance --tk-target opencl [--tk-level manifest,runtime]
           [--tk-shapes-per-op 1] [--tk-dtype float32] [--tk-op add] [--tk-min-target-share 0.9]

The core distribution registers this module as a pytest plugin (entry point group
`pytest11`), so the options exist wherever tensorkiln is installed.
`test_conformance.py` parametrizes one item per check: skipped checks are
skipped with their reason, checks in the plugin's expected-failure file are
xfail, optional checks that fail are xfail (non-strict) with the failure shown.
"""
from __future__ import annotations

import pytest

from .catalogue import LEVELS

__all__ = ["pytest_addoption", "pytest_generate_tests"]


def pytest_addoption(parser) -> None:
    group = parser.getgroup("tensorkiln-conformance", "tensorkiln conformance kit")
    group.addoption("--tk-target", action="store", default=None, metavar="TARGET",
                    help="target to run the conformance kit on (e.g. cpu_llvm, opencl)")
    group.addoption("--tk-level", action="store", default=",".join(LEVELS), metavar="LEVELS",
                    help=f"comma-separated levels: {', '.join(LEVELS)} (default: all)")
    group.addoption("--tk-shapes-per-op", action="store", type=int, default=3, help="shape variants per op (1-3)")
    group.addoption("--tk-dtype", action="append", default=None, help="only these dtypes in the ops level")
    group.addoption("--tk-op", action="append", default=None, help="only these ops in the ops level")
    group.addoption("--tk-min-target-share", action="store", type=float, default=0.0, metavar="FRACTION",
                    help="models level: fail a model when less than this share of its ops (0-1) runs on the target")


def _kit(config):
    cached = getattr(config, "_tensorkiln_kit", None)
    if cached is not None:
        return cached
    from .catalogue import KitOptions, catalogue
    from .expected import load_expected
    from .runner import resolve_target

    target = resolve_target(config.getoption("--tk-target"))
    levels = tuple(level.strip() for level in config.getoption("--tk-level").split(",") if level.strip())
    dtypes, ops = config.getoption("--tk-dtype"), config.getoption("--tk-op")
    min_share = config.getoption("--tk-min-target-share")
    if not 0.0 <= min_share <= 1.0:
        raise pytest.UsageError(f"--tk-min-target-share {min_share} is not between 0 and 1 (e.g. 0.9)")
    options = KitOptions(shapes_per_op=config.getoption("--tk-shapes-per-op"),
                         dtypes=tuple(dtypes) if dtypes else None, ops=tuple(ops) if ops else None,
                         min_target_share=min_share)
    checks = catalogue(target, levels, options)
    if not target.spec.is_available:
        from .runner import _unavailable
        checks = _unavailable(checks, target)
    config._tensorkiln_kit = (target, checks, load_expected(target))
    return config._tensorkiln_kit


def pytest_generate_tests(metafunc) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return
    if not metafunc.config.getoption("--tk-target", default=None):
        metafunc.parametrize("conformance_check", [pytest.param(None, marks=pytest.mark.skip(
            reason="pass --tk-target TARGET to run the tensorkiln conformance kit"))], ids=["no-target"])
        return
    target, checks, expected = _kit(metafunc.config)
    params = []
    for check in checks:
        marks = []
        if check.is_skipped:
            marks.append(pytest.mark.skip(reason=check.skip_reason))
        elif expected is not None and expected.reason(check.id) is not None:
            marks.append(pytest.mark.xfail(reason=f"expected failure: {expected.reason(check.id)}", strict=False))
        marks.append(getattr(pytest.mark, f"tk_{check.level}"))
        params.append(pytest.param(check, marks=marks, id=check.id))
    metafunc.parametrize("conformance_check", params)


@pytest.fixture
def conformance_target(request):
    return _kit(request.config)[0]


def pytest_configure(config) -> None:
    for level in LEVELS:
        config.addinivalue_line("markers", f"tk_{level}: tensorkiln conformance checks of the {level} level")
