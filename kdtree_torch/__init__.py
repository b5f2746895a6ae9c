"""The kernels as PyTorch operators (`torch.ops.kdtree.*`, kdtree_torch/ops.py: importing it registers them) and their
conformance adapter (`--impl torch-ops`, kdtree_torch/adapter.py, which loads without torch).

Above kernels_cu, below the harness: imports torch, the contract, kernels_cu and adapters' protocol, never the harness
or the references (meta/test_layers.py). `kdtree_torch.check`, `new_error_flag` and `reset` are kdtree_torch.ops'
(imported on first use)."""

_FROM_OPS = ("OPERATORS", "check", "new_error_flag", "reset")


def __getattr__(name):
    if name in _FROM_OPS:
        from . import ops

        return getattr(ops, name)
    raise AttributeError(f"module 'kdtree_torch' has no attribute {name!r}")
