"""Fixtures of the conformance suite (no helpers: those live in the harness package)."""

import pytest

from harness import impls


@pytest.fixture(scope="session")
def impl(request):
    """The implementation under test (parametrized by the root conftest from --impl)."""
    try:
        return impls.get(request.param)
    except impls.MissingTool as e:
        (pytest.fail if request.config.getoption("--require-tools") else pytest.skip)(str(e))
    except impls.Unavailable as e:
        pytest.skip(str(e))
