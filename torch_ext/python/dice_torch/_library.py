"""Finds and loads libdice_torch_ext.so (the C++ runtime and its torch ops).

Search order: ``$DICE_TORCH_LIB`` (a path to the .so), ``$DICE_BUILD_DIR``
(a CMake build directory: ``<dir>/torch_ext/libdice_torch_ext.so``), then
``build/torch_ext/libdice_torch_ext.so`` of the checkout this package lives
in (an editable install or ``PYTHONPATH=torch_ext/python``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

_LIB_NAME = "libdice_torch_ext.so"
_lock = threading.Lock()
_loaded: str | None = None


def candidate_paths() -> list[Path]:
    """Where the library is looked for, in order (see the module docstring)."""
    paths: list[Path] = []
    if os.environ.get("DICE_TORCH_LIB"):
        paths.append(Path(os.environ["DICE_TORCH_LIB"]))
    if os.environ.get("DICE_BUILD_DIR"):
        paths.append(Path(os.environ["DICE_BUILD_DIR"]) / "torch_ext" / _LIB_NAME)
    checkout = Path(__file__).resolve().parents[3]  # <repo>/torch_ext/python/dice_torch/_library.py
    paths.append(checkout / "build" / "torch_ext" / _LIB_NAME)
    return paths


def load() -> str:
    """Loads the library once per process (``torch.ops.load_library``) and returns its path.

    After this, ``torch.ops.dice.run_group`` and the other ``dice::`` ops exist.
    Raises:
        FileNotFoundError: no library at any candidate path (the message lists
            them and says how to build one).
        OSError: the library exists but cannot be loaded (message from the loader).
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        tried = candidate_paths()
        for path in tried:
            if path.is_file():
                torch.ops.load_library(str(path))
                _loaded = str(path)
                return _loaded
        raise FileNotFoundError(
            f"dice_torch: {_LIB_NAME} not found (looked at: {', '.join(str(p) for p in tried)}); "
            "build it with `bash scripts/setup.sh` or set DICE_TORCH_LIB=/path/to/" + _LIB_NAME
        )
