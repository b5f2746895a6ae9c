"""The lab: research and design scripts beside the product (lab/README.md says what each one answers).

Nothing in the conformance suite imports them; they run from the repository root as `python -m lab.NAME`, and
the GPU job (tools/gpu_suite.sh) runs two of them as its `sanitizer` and `tb_dev` stages.
"""
