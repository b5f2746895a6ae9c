"""Fixtures of the conformance suite (no helpers: those live in the harness package)."""

import pytest

from harness import claims, impls


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


@pytest.fixture(autouse=True)
def _served_by(request):
    """Which kernel spec served this test's calls (a variant may hand cases it does not take to another):
    recorded for the conformance report."""
    from kernels_cu import tree_verify_ops

    tree_verify_ops.take_served()
    yield
    served = tree_verify_ops.take_served()
    if served:
        request.node.user_properties.append(("served_by", served))


@pytest.fixture(autouse=True)
def _declaration(request):
    """An external implementation's declaration, while its test runs: the strategies draw inside it, and a
    test of a clause needing a promise it does not make (determinism, batch invariance) is not claimed."""
    if "impl" not in request.fixturenames:
        yield
        return
    impl = request.getfixturevalue("impl")
    if impl.declaration is not None:
        ids = [i for m in request.node.iter_markers("spec") for i in m.args]
        why = claims.unpromised(impl.declaration, ids)
        if why:
            claims.not_claimed(f"{impl.name}: {why}")
    token = claims.activate(impl if impl.declaration is not None else None)
    try:
        yield
    finally:
        claims.deactivate(token)
