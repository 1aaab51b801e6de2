"""The ``dice_torch`` logger, ``DICE_LOG_LEVEL``, one-time warnings and the
backend's own counters (fallbacks by stage).

``DICE_LOG_LEVEL`` (trace | debug | info | warn | error | off; the same names
as the C++ side) sets the level of the ``dice_torch`` logger when the package
is imported and whenever ``apply_log_level`` is called; unset, the logger
keeps the level ``logging`` gives it (by default it inherits WARNING from the
root logger). A level below WARNING with no handler configured (on the
logger or above it) adds one that prints the bare message to stderr, as the
C++ side does. At INFO the backend logs one line per fusion group formed,
tuned (region decision) and served (the whole-graph guard's choice).
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from typing import Any

log = logging.getLogger("dice_torch")

TRACE = 5  #: below DEBUG: per-call detail
logging.addLevelName(TRACE, "TRACE")

LEVELS = {"trace": TRACE, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
          "warning": logging.WARNING, "error": logging.ERROR, "off": logging.CRITICAL + 10}

#: Stages of dice's part of the backend whose failure falls back to the rest compiler.
STAGES = ("load", "partition", "decompositions", "compile", "tune")

_lock = threading.Lock()
_warned: set[str] = set()
_counters: dict[str, Any] = {"graphs": 0, "graphs_with_dice": 0, "passthrough_no_gpu": 0,
                             "fallbacks": {s: 0 for s in STAGES}}


def parse_level(text: str) -> int:
    """The logging level of a DICE_LOG_LEVEL value (case-insensitive).
    Raises:
        ValueError: an unknown name (the message lists the accepted ones)."""
    level = LEVELS.get(text.strip().lower())
    if level is None:
        raise ValueError(f"DICE_LOG_LEVEL='{text}' (expected trace|debug|info|warn|error|off)")
    return level


def apply_log_level(value: str | None = None) -> int | None:
    """Sets the ``dice_torch`` logger's level from ``value`` (default
    ``$DICE_LOG_LEVEL``) and returns it; None (level untouched) when unset. An
    unknown name is reported once as a warning and leaves the level as it was."""
    value = os.environ.get("DICE_LOG_LEVEL") if value is None else value
    if not value:
        return None
    try:
        level = parse_level(value)
    except ValueError as e:
        warn_once("bad-log-level", str(e))
        return None
    log.setLevel(level)
    if level < logging.WARNING and not log.hasHandlers():
        # Python's last-resort handler prints WARNING and above only, so
        # without a handler of the application's an INFO level would print
        # nothing: the C++ side's lines would show and these would not.
        # Below WARNING only: warn() prints warnings through ``warnings``.
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.addFilter(lambda record: record.levelno < logging.WARNING)
        log.addHandler(handler)
    return level


def warn_once(key: str, message: str) -> bool:
    """Emits ``message`` once per process and ``key`` through both Python
    ``warnings`` (UserWarning) and the ``dice_torch`` logger (WARNING).
    Returns True when it was emitted now."""
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    warn(message)
    return True


def warn(message: str) -> None:
    """``message`` through ``warnings.warn`` (UserWarning) and, when logging
    is configured (a handler on the ``dice_torch`` logger or above it),
    ``log.warning``, every time. Unconfigured, ``logging``'s last-resort
    handler would print the record to stderr beside the warning: the user
    read every message twice. Nothing at all when the logger's level is
    above WARNING (``DICE_LOG_LEVEL=error|off``, or ``logging`` set so):
    the user asked for silence, and ``warnings`` would ignore it."""
    if not log.isEnabledFor(logging.WARNING):
        return
    warnings.warn(message, UserWarning, stacklevel=3)
    if log.hasHandlers():
        log.warning("%s", message)


def reset_warnings() -> None:
    """Forgets which one-time warnings were emitted (tests)."""
    with _lock:
        _warned.clear()


def count(name: str, stage: str | None = None) -> None:
    """Adds one to counter ``name`` ("graphs", ...) or, with ``stage``, to ``fallbacks[stage]``."""
    with _lock:
        if stage is not None:
            _counters["fallbacks"][stage] = _counters["fallbacks"].get(stage, 0) + 1
        else:
            _counters[name] = _counters.get(name, 0) + 1


def counters() -> dict[str, Any]:
    """A copy of the backend's counters: graphs (compiled by the backend),
    graphs_with_dice (at least one region given to dice), passthrough_no_gpu,
    fallbacks {stage: graphs that fell back to the rest compiler}."""
    with _lock:
        out = dict(_counters)
        out["fallbacks"] = dict(_counters["fallbacks"])
        return out


def reset_counters() -> None:
    """Zeroes the backend's counters (tests)."""
    with _lock:
        for k in list(_counters):
            _counters[k] = {s: 0 for s in STAGES} if k == "fallbacks" else 0
