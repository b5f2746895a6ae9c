"""Root pytest hooks: options, hypothesis profiles, GPU probe -> skips, clause validation, report header.

Hooks only. Everything importable lives in the `harness` package (cuda-python's rule: never import
from a conftest).
"""

from __future__ import annotations

import os
import pathlib

import pytest

from harness import claims, device, env_names, gpu_health, impls, profiles, selection, spec
from harness.bench import ceilings, record, stages

pytest_plugins = ["harness.reporting"]
ROOT = pathlib.Path(__file__).resolve().parent
_GPUS = pytest.StashKey[list]()

# Profiles (quick, dev, ci, thorough: harness/profiles.py says what each runs).
profiles.load()


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        action="append",
        default=None,
        help="implementation(s) under test, repeat for several: reference, cuda (every variant), cuda:NAME, "
        "engine-cpu, engine-cuda, or an external one: module:attribute of an adapters.Implementation or an "
        "installed entry point's name (docs/ADAPTERS.md) (default: the built-ins; those that cannot run here "
        "skip with the reason)",
    )
    selection.add_options(parser)
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=bool(os.environ.get("KDTREE_REQUIRE_GPU")),
        help="turn 'no GPU' skips into failures (GPU runners)",
    )
    parser.addoption(
        "--require-tools",
        action="store_true",
        default=bool(os.environ.get("KDTREE_REQUIRE_TOOLS")),
        help="turn 'tool not built' skips (kdtr-inspect, fuzzer, NVRTC) into failures (CI)",
    )
    group = parser.getgroup("kdtr perf", "the benchmarks under perf/ (harness/bench/stages.py)")
    group.addoption(
        "--perf-stage",
        default=os.environ.get("KDTREE_PERF_STAGE") or None,
        help=f"run one stage of the perf suite: {', '.join(stages.STAGES)} (default: every case)",
    )
    group.addoption(
        "--perf-quick",
        action="store_true",
        default=bool(os.environ.get("KDTREE_PERF_QUICK")),
        help="a reduced grid (cases marked perf_full are left out)",
    )
    group.addoption(
        "--perf-no-comparators",
        action="store_true",
        default=bool(os.environ.get("KDTREE_PERF_NO_COMPARATORS")),
        help="time the kernels only (the regression gate's reruns)",
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist controller: hand each worker one GPU, round-robin (several workers may share one)."""
    gpus = node.config.stash.setdefault(_GPUS, device.visible_gpu_ids())
    if gpus:
        index = int(node.gateway.id.removeprefix("gw"))
        node.workerinput["kdtr_gpu"] = gpus[index % len(gpus)]


def pytest_configure(config):
    """Everyone: no environment variable under an old name (harness/env_names.py). xdist worker: pin the GPU
    before anything initialises CUDA (the probe is lazy). Everyone: check --impl
    against the registry and --perf-stage against the stages. A benchmark JSON asked for under xdist is a
    usage error: pytest-benchmark switches itself off there and writes nothing."""
    try:  # first: an environment variable under its old KDTR_ name would be ignored without a word (KDTREE_ now)
        env_names.check()
    except env_names.OldEnvironmentName as e:
        raise pytest.UsageError(str(e)) from None
    gpu = getattr(config, "workerinput", {}).get("kdtr_gpu")
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    if config.getoption("benchmark_json", None) and config.getoption("dist", "no") != "no":
        raise pytest.UsageError(
            "--benchmark-json under pytest-xdist: pytest-benchmark disables itself there and writes no file; "
            "run the benchmarks without -n (e.g. `pytest perf --benchmark-json FILE`)"
        )
    try:
        impls.expand(config.getoption("--impl"))
        stages.check(config.getoption("--perf-stage"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None


def pytest_report_header(config):
    p = device.probe()
    return [
        f"kdtr: gpu: {p.reason}; nvrtc: {device.nvrtc_version()}; hypothesis profile: "
        f"{profiles.current()}; impl: {','.join(impls.expand(config.getoption('--impl')))}"
    ]


def pytest_generate_tests(metafunc):
    if "impl" in metafunc.fixturenames:
        chosen = impls.expand(metafunc.config.getoption("--impl"))
        metafunc.parametrize("impl", chosen, indirect=True, ids=[f"impl={n}" for n in chosen])


def _select_perf(config, items):
    """--perf-stage / --perf-quick: deselect the perf cases outside the stage or the quick grid."""
    stage, quick = config.getoption("--perf-stage"), config.getoption("--perf-quick")
    if stage is None and not quick:
        return
    keep, drop = [], []
    for item in items:
        names = {n for m in item.iter_markers("perf_stage") for n in m.args}
        perf = item.get_closest_marker("perf") is not None
        ok = not perf or stages.selected(
            names, item.get_closest_marker("perf_full") is not None, stage=stage, quick=quick
        )
        (keep if ok else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    _select_perf(config, items)
    selection.select(config, items)
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
        item.user_properties.append(("spec_ids", spec.for_dtype(ids, params.get("dtype"))))
        item.user_properties.append(("impl", impl))
        item.user_properties.append(
            ("device", impls.device_label(impl, params.get("arch"), item.get_closest_marker("gpu") is not None))
        )
        item.user_properties.append(
            ("worker_gpu", (os.environ.get("PYTEST_XDIST_WORKER", "main"), os.environ.get("CUDA_VISIBLE_DEVICES")))
        )
    if errors:
        raise pytest.UsageError("clause validation failed:\n  " + "\n  ".join(errors))


def _on_gpu(item) -> bool:
    params = getattr(item, "callspec", None)
    impl = params.params.get("impl") if params else None
    return bool(item.get_closest_marker("gpu") or (impl and impls.on_gpu(impl)))


def pytest_runtest_setup(item):
    why = selection.not_claimed_here(item)
    if why:
        claims.not_claimed(why)
    on_gpu = _on_gpu(item)
    if on_gpu:
        p = device.probe()
        if not p.ok:
            (pytest.fail if item.config.getoption("--require-gpu") else pytest.skip)(f"GPU unavailable: {p.reason}")
        broken = gpu_health.before_test()  # an earlier test of this process broke the context: name it
        if broken:
            pytest.fail(broken)
    reason = profiles.left_out(item.get_closest_marker("full") is not None, on_gpu)
    if reason:
        pytest.skip(reason)


@pytest.hookimpl(trylast=True)  # after the fixtures' teardown (a test's buffers and graphs are freed by then)
def pytest_runtest_teardown(item):
    """A GPU test that leaves the CUDA context broken or a capture open errors here, naming what it left."""
    if _on_gpu(item) and device.probe().ok:
        problem = gpu_health.after_test(item.nodeid)
        if problem:
            pytest.fail(problem)


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
    machine_info["packages"] = device.package_versions()


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """The run's own facts beside pytest-benchmark's: the command, the stage, and the ceilings measured."""
    output_json["kdtr"] = {
        "command": record.portable_command(list(config.invocation_params.args), config.getoption("benchmark_json")),
        "stage": config.getoption("--perf-stage"),
        "quick": config.getoption("--perf-quick"),
        "comparators": not config.getoption("--perf-no-comparators"),
        "ceilings": ceilings.snapshot(),
        "kernel_mutant": config.getoption("--kernel-mutant", default=None),
    }
