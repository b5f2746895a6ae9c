"""Fixtures of the conformance suite (no helpers: those live in the harness package)."""

import pytest

from harness import impls


@pytest.fixture(scope="session")
def impl(request):
    """The implementation under test (parametrized by the root conftest from --impl); skips with the
    reason when it cannot run on this machine at all."""
    try:
        i = impls.get(request.param)
    except impls.Unavailable as e:
        pytest.skip(str(e))
    if i.why_not:
        missing = i.missing_tool and request.config.getoption("--require-tools")
        (pytest.fail if missing else pytest.skip)(f"{i.name}: {i.why_not}")
    return i
