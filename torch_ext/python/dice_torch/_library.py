"""Finds and loads libdice_torch_ext.so (the C++ runtime and its torch ops).

Where: ``$DICE_TORCH_LIB`` (a path to the .so) when set, else
``$DICE_BUILD_DIR`` (a CMake build directory:
``<dir>/torch_ext/libdice_torch_ext.so``) when set, else
``build/torch_ext/libdice_torch_ext.so`` of the checkout this package lives
in (an editable install or ``PYTHONPATH=torch_ext/python``). A variable that
is set is the only place looked at: a wrong path is an error naming it, never
a silent fall-through to another library.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

_LIB_NAME = "libdice_torch_ext.so"
_lock = threading.Lock()
_loaded: str | None = None


def _configured() -> tuple[str | None, Path]:
    """The variable that names the library (None: the checkout's build) and its path."""
    if os.environ.get("DICE_TORCH_LIB"):
        return "DICE_TORCH_LIB", Path(os.environ["DICE_TORCH_LIB"])
    if os.environ.get("DICE_BUILD_DIR"):
        return "DICE_BUILD_DIR", Path(os.environ["DICE_BUILD_DIR"]) / "torch_ext" / _LIB_NAME
    checkout = Path(__file__).resolve().parents[3]  # <repo>/torch_ext/python/dice_torch/_library.py
    return None, checkout / "build" / "torch_ext" / _LIB_NAME


def candidate_paths() -> list[Path]:
    """Where the library is looked for (see the module docstring): one path."""
    return [_configured()[1]]


def load() -> str:
    """Loads the library once per process (``torch.ops.load_library``) and returns its path.

    After this, ``torch.ops.dice.run_group`` and the other ``dice::`` ops exist.
    Raises:
        FileNotFoundError: no library at the path (the message names it, and
            the variable that set it, and says how to build one).
        OSError: the library exists but cannot be loaded (message from the loader).
    """
    global _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        named, path = _configured()
        if path.is_file():
            torch.ops.load_library(str(path))
            _loaded = str(path)
            return _loaded
        where = f"{named} names {path}, which is no file" if named else f"looked at: {path}"
        raise FileNotFoundError(
            f"dice_torch: {_LIB_NAME} not found ({where}); "
            "build it with `bash scripts/setup.sh` or set DICE_TORCH_LIB=/path/to/" + _LIB_NAME
        )
