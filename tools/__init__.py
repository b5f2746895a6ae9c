"""What a user or the GPU job runs (README, folder map): the shell entry points (setup.sh, gpu_suite.sh,
sm120_certify.sh, peers_setup.sh) and the Python commands, which run from the repository root as
`python -m tools.NAME` (bench_report, perf_gate, engine_numbers, peers_smoke, sm120_summary). A package so that
they import the project without installing it or patching sys.path; nothing here is imported by the product."""
