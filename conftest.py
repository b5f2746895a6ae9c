"""Root pytest hooks: options, hypothesis profiles, GPU probe -> skips, clause validation, report header.

Hooks only. Everything importable lives in the `harness` package (cuda-python's rule: never import
from a conftest).
"""

from __future__ import annotations

import os
import pathlib

import pytest
from hypothesis import HealthCheck, settings

from harness import device, impls, spec

pytest_plugins = ["harness.reporting"]
ROOT = pathlib.Path(__file__).resolve().parent
_GPUS = pytest.StashKey[list]()

# Profiles: deadlines off everywhere (the first GPU call pays for NVRTC and module load).
settings.register_profile("dev", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci",
    settings.get_profile("ci"),
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        action="append",
        default=None,
        help="implementation(s) under test, repeat for several: reference, cuda (every variant), cuda:NAME, "
        "engine-cpu, engine-cuda (default: all; those that cannot run here skip with the reason)",
    )
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=bool(os.environ.get("KDTR_REQUIRE_GPU")),
        help="turn 'no GPU' skips into failures (GPU runners)",
    )
    parser.addoption(
        "--require-tools",
        action="store_true",
        default=bool(os.environ.get("KDTR_REQUIRE_TOOLS")),
        help="turn 'tool not built' skips (kdtr-inspect, fuzzer, NVRTC) into failures (CI)",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist controller: hand each worker one GPU, round-robin (several workers may share one)."""
    gpus = node.config.stash.setdefault(_GPUS, device.visible_gpu_ids())
    if gpus:
        index = int(node.gateway.id.removeprefix("gw"))
        node.workerinput["kdtr_gpu"] = gpus[index % len(gpus)]


def pytest_configure(config):
    """xdist worker: pin the GPU before anything initialises CUDA (the probe is lazy). Everyone: check
    --impl against the registry."""
    gpu = getattr(config, "workerinput", {}).get("kdtr_gpu")
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    try:
        impls.expand(config.getoption("--impl"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_report_header(config):
    p = device.probe()
    return [
        f"kdtr: gpu: {p.reason}; nvrtc: {device.nvrtc_version()}; hypothesis profile: "
        f"{settings._current_profile}; impl: {','.join(impls.expand(config.getoption('--impl')))}"
    ]


def pytest_generate_tests(metafunc):
    if "impl" in metafunc.fixturenames:
        chosen = impls.expand(metafunc.config.getoption("--impl"))
        metafunc.parametrize("impl", chosen, indirect=True, ids=[f"impl={n}" for n in chosen])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    registry = spec.registry()
    errors = []
    for item in items:
        ids = [i for m in item.iter_markers("spec") for i in m.args]
        path = pathlib.Path(str(item.path)).resolve()
        if path.is_relative_to(ROOT / "conformance") and not ids:
            errors.append(f"{item.nodeid}: conformance test without @pytest.mark.spec(...)")
        errors += [f"{item.nodeid}: unknown spec clause {i!r}" for i in ids if i not in registry]
        params = getattr(item, "callspec", None)
        params = params.params if params else {}
        impl = params.get("impl", params.get("reader", "-"))
        item.user_properties.append(("spec_ids", tuple(ids)))
        item.user_properties.append(("impl", impl))
        item.user_properties.append(
            ("device", impls.device_label(impl, params.get("arch"), item.get_closest_marker("gpu") is not None))
        )
        item.user_properties.append(
            ("worker_gpu", (os.environ.get("PYTEST_XDIST_WORKER", "main"), os.environ.get("CUDA_VISIBLE_DEVICES")))
        )
    if errors:
        raise pytest.UsageError("clause validation failed:\n  " + "\n  ".join(errors))


def pytest_runtest_setup(item):
    params = getattr(item, "callspec", None)
    impl = params.params.get("impl") if params else None
    if item.get_closest_marker("gpu") or (impl and (impl.startswith("cuda") or impl == "engine-cuda")):
        p = device.probe()
        if not p.ok:
            (pytest.fail if item.config.getoption("--require-gpu") else pytest.skip)(f"GPU unavailable: {p.reason}")


def pytest_benchmark_update_machine_info(config, machine_info):
    p = device.probe()
    machine_info["gpu"] = {
        "name": p.name or None,
        "arch": p.arch or None,
        "driver": device.driver_version_string() or None,
        "driver_api": p.driver or None,
        "nvrtc": device.nvrtc_version(),
        "probe": p.reason,
    }
    machine_info["git_revision"] = device.git_revision(str(ROOT))
