"""Repository-wide pytest options: long cases are marked `slow` and run only with --runslow.

CI (`python3 -m pytest -q`) must stay under 25 minutes on a 2-core AVX2 host, so a case that
takes more than a few seconds on its own (a full model on a simulated device, a long fuzz run,
a tuning session) is marked `@pytest.mark.slow` and runs with `pytest --runslow` or TK_RUN_SLOW=1.
"""
import os

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow (long model, fuzz and tuning cases)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long case, run only with --runslow or TK_RUN_SLOW=1")
    config.addinivalue_line("markers", "gpu: needs a real GPU; skips with the target's reason elsewhere")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow") or os.environ.get("TK_RUN_SLOW") == "1":
        return
    skip_slow = pytest.mark.skip(reason="slow case: run with --runslow or TK_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(autouse=True)
def _environment_locale():
    """Each test starts in the environment's character locale.

    A native library loaded by an earlier test may switch the process's C locale to "C"
    (seen in the full suite: subprocess output and source files then decode as ASCII and
    fail on the first "—"); text decoding in a test must not depend on test order.
    """
    import locale
    try:
        locale.setlocale(locale.LC_CTYPE, "")
    except locale.Error:
        pass
    yield
