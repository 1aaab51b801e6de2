"""dice_torch: the DICE runtime as a torch.compile backend.

    import dice_torch                                   # or rely on the entry point
    model = torch.compile(model, backend="dice")        # options={"mode": ..., "rest": "eager"}
    fast = dice_torch.optimize(model, example_inputs, mode="tune-sync")
    served = dice_torch.replayed(torch.jit.load("m.served.pt").cuda(), mode="tune-sync")  # CUDA-graph replay where faster

Fusion groups of the ATen graph (elementwise chains, reductions, softmax /
log_softmax, layer/group norm, the epilogues after matmuls) become calls to
the C++ op ``dice::run_group`` (torch_ext/include/dice/torch_ext/run_group.h),
which serves cached winner kernels and otherwise runs the group with ATen.
Environment: DICE_MODE, DICE_CACHE_DIR (as the C++ side), DICE_TORCH_LIB /
DICE_BUILD_DIR (where libdice_torch_ext.so is), DICE_LOG_LEVEL (trace|debug|
info|warn|error|off: the ``dice_torch`` logger), DICE_TORCH_FORCE_PARTITION=1
(partition on CPU too: a test switch), DICE_TORCH_CUDAGRAPHS=off (no
CUDA-graph replay, replay.py).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from . import _library, logs
from .backend import (CompileReport, OptimizedModel, backend_stats, clear_reports, dice_backend, group_stats,
                      last_report, optimize, reports)
from .partition import FusionGroup, LeftOut, PartitionReport, fuse_dice_groups
from .replay import replayed

__all__ = ["CompileReport", "backend_stats", "FusionGroup", "LeftOut", "OptimizedModel", "PartitionReport", "clear_reports",
           "dice_backend", "fuse_dice_groups", "group_stats", "last_report", "load_library", "optimize", "replayed", "reports"]

load_library = _library.load


def _register() -> None:
    # An installed package declares the backend as an entry point
    # (torch_dynamo_backends), which dynamo registers itself on first lookup;
    # registering here as well would be a duplicate. Otherwise (PYTHONPATH
    # use) register on import.
    if "dice" in entry_points(group="torch_dynamo_backends").names:
        return
    from torch._dynamo import register_backend
    from torch._dynamo.backends.registry import list_backends

    if "dice" not in list_backends(exclude_tags=()):
        register_backend(dice_backend, name="dice")


logs.apply_log_level()
_register()
