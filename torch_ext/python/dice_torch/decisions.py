"""Per-region and whole-graph decisions of the backend, and where they are stored.

Issue 17 items 1 and 2: with ``rest="inductor"`` a fusion region is given
to dice only where the graph compiled with that region given to dice ran
faster than the graph compiled without it (both with Inductor for the rest);
the whole graph then runs dice + Inductor only when that beats Inductor
alone (the guard). The functions here are pure (timings in, decision out),
so they are unit-tested on CPU with fake timings; ``measure.py`` produces
the timings on a GPU.

Decisions persist in ``<cache_dir>/torch_decisions.json`` (this module's
own side file; the C++ cache is not touched), keyed by (region key,
baseline "inductor" | "eager", torch version); ``cache`` mode reads them and
never measures. The file is rewritten atomically (temporary file + rename,
under an flock on ``<file>.lock``), merging with what other processes wrote.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import statistics
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from . import capture

DICE, INDUCTOR = "dice", "inductor"
#: A region or graph keeps dice only when at least this much faster (fraction
#: of the baseline's time): below it, timing noise would decide.
MIN_GAIN = 0.01
#: The whole-graph guard's margin (see decide_guard).
GUARD_MIN_GAIN = 0.02
FILE_NAME = "torch_decisions.json"
_VERSION = 1


@dataclass
class RegionDecision:
    """Who runs one fusion region (all groups of one region key) and why."""

    key: str                     #: region_key(): IR text + input signature
    summary: str                 #: "mul+add+gelu"
    choice: str                  #: "dice" | "inductor"
    source: str                  #: "measured" | "cache" | "no winner" | "undecided" | "not measured: ..."
    dice_us: float | None = None  #: median µs of the graph with this region given to dice
    base_us: float | None = None  #: median µs of the graph without (the baseline alone)


@dataclass
class GuardResult:
    """The whole-graph guard: baseline alone vs dice + baseline."""

    choice: str                  #: "dice" | "inductor"
    source: str                  #: "measured" | "cache" | "nothing for dice" | "not measured: ..."
    dice_us: float | None = None
    base_us: float | None = None


def region_key(ir_text: str, input_signature: str) -> str:
    """Stable key of a region: sha256 (hex, 24 chars) of its IR canonical text
    and its inputs' signature (dtype, shape, strides of every input)."""
    h = hashlib.sha256(ir_text.encode())
    h.update(b"\0")
    h.update(input_signature.encode())
    return h.hexdigest()[:24]


def graph_key(region_keys: Sequence[str]) -> str:
    """Key of a graph's guard decision: its sorted distinct region keys, hashed."""
    return "graph:" + hashlib.sha256("\n".join(sorted(set(region_keys))).encode()).hexdigest()[:24]


def fx_graph_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str:
    """Key of dynamo's graph before any compile: sha256 (24 hex chars) of its
    Python code and every input's (dtype, shape, strides, device type), or
    repr for a non-tensor. A stored "inductor alone" under it lets ``cache``
    mode hand the graph to Inductor without partitioning it first (one
    compile instead of two). Callers use it for static shapes only. With
    ``DICE_TORCH_ELEMENTWISE_REGIONS=1`` the key differs (elementwise regions
    are then measured, so an "inductor alone" decided without them does not apply)."""
    h = hashlib.sha256(gm.code.encode())
    if elementwise_regions_measured():
        h.update(b"\0elementwise regions measured")
    for x in example_inputs:
        h.update(b"\0")
        if isinstance(x, torch.Tensor):
            h.update(f"{x.dtype}|{tuple(x.shape)}|{tuple(x.stride())}|{x.device.type}".encode())
        else:
            h.update(repr(x).encode())
    return "fx:" + h.hexdigest()[:24]


def fx_graph_entry(choice: str, source: str, regions: Sequence[Any], decided: dict[str, "RegionDecision"],
                   dice_us: float | None = None, base_us: float | None = None) -> dict[str, Any]:
    """What is stored under a ``fx_graph_key``: the graph's choice ("dice",
    "inductor" or "undecided"), its source, the guard's µs, and [key,
    summary, choice] of each region in ``regions`` (objects with .key and
    .summary) that ``decided`` holds, which ``cache`` mode shows in the report."""
    return {"choice": choice, "source": source, "dice_us": dice_us, "base_us": base_us,
            "regions": [[r.key, r.summary, decided[r.key].choice] for r in regions if r.key in decided]}


def median_us(samples: Sequence[float]) -> float:
    """Median of timing samples (µs).
    Raises:
        ValueError: no samples."""
    if not samples:
        raise ValueError("median of no timing samples")
    return float(statistics.median(samples))


def keep_dice(dice_us: float, base_us: float, min_gain: float = MIN_GAIN) -> bool:
    """True when dice's variant (µs) beats the baseline's (µs) by at least
    ``min_gain`` of the baseline: the region (or graph) goes to dice only then;
    a tie or a loss keeps the baseline, so Inductor can fuse across the region."""
    return dice_us < base_us * (1.0 - min_gain)


def decide_region(key: str, summary: str, dice_us: float, base_us: float,
                  min_gain: float = MIN_GAIN, won: bool | None = None) -> RegionDecision:
    """The measured decision for one region (timings in µs). ``won``: the
    comparison's own verdict (measure.Comparison.variant_wins: every round
    agrees); None decides from the two medians alone."""
    keep = keep_dice(dice_us, base_us, min_gain) if won is None else won
    return RegionDecision(key, summary, DICE if keep else INDUCTOR, "measured", dice_us, base_us)


def decide_guard(dice_us: float, base_us: float, min_gain: float = GUARD_MIN_GAIN,
                 won: bool | None = None) -> GuardResult:
    """The whole-graph guard's choice from the two graphs' medians (µs);
    ``won`` as in decide_region. The guard asks for GUARD_MIN_GAIN: keeping a
    graph that is in truth slower breaks the "never slower" promise, while
    leaving a slightly faster one to Inductor costs only that little."""
    keep = keep_dice(dice_us, base_us, min_gain) if won is None else won
    return GuardResult(DICE if keep else INDUCTOR, "measured", dice_us, base_us)


def torch_version() -> str:
    """The torch version the decisions are valid for (``torch.__version__``)."""
    return str(torch.__version__)


def _entry_key(key: str, baseline: str, version: str) -> str:
    return f"{key}|{baseline}|{version}"


class DecisionStore:
    """The decisions side file of one cache directory (see the module docstring).

    Args:
        cache_dir: the DICE cache directory ("" -> $DICE_CACHE_DIR, else ~/.cache/dice).
    """

    def __init__(self, cache_dir: str):
        root = cache_dir or os.environ.get("DICE_CACHE_DIR") or os.path.join(Path.home(), ".cache", "dice")
        self.path = Path(root) / FILE_NAME
        self._entries: dict[str, Any] | None = None  # what get() reads: the file once, then our own writes

    def _read(self) -> dict[str, Any]:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    def get(self, key: str, baseline: str, version: str | None = None) -> dict[str, Any] | None:
        """The stored decision for (key, baseline, version) as a dict (choice,
        source, dice_us, base_us, ...), or None when there is none (or the file
        is missing or unreadable). The file is read on the first get() of this
        store; later writes by other processes are seen by a new store."""
        if self._entries is None:
            self._entries = self._read()
        return self._entries.get(_entry_key(key, baseline, version or torch_version()))

    def put_many(self, items: Sequence[tuple[str, dict[str, Any]]], baseline: str,
                 version: str | None = None) -> None:
        """Stores decisions [(key, fields)] for ``baseline``, atomically.
        Raises:
            OSError: the cache directory cannot be created or written."""
        if not items:
            return
        version = version or torch_version()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(str(self.path) + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self._read()
            for key, fields in items:
                entries[_entry_key(key, baseline, version)] = dict(fields)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=FILE_NAME + ".")
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"version": _VERSION, "entries": entries}, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
                self._entries = entries
            except BaseException:
                os.unlink(tmp)
                raise

    def put_region(self, d: RegionDecision, baseline: str) -> None:
        """Stores one region decision (``put_many`` of one)."""
        self.put_many([(d.key, asdict(d))], baseline)


#: IR op names of the elementwise categories (unary, binary: capture's
#: EPILOGUE_IR_OPS; and cast): a region made only of these is one Inductor
#: fuses into a single kernel too.
ELEMENTWISE_IR_OPS = capture.EPILOGUE_IR_OPS | {"cast", "identity"}
#: ``DICE_TORCH_ELEMENTWISE_REGIONS=1`` tunes and measures elementwise-only
#: regions with ``rest="inductor"`` as before (see ELEMENTWISE_SOURCE).
ELEMENTWISE_ENV = "DICE_TORCH_ELEMENTWISE_REGIONS"
#: The source of the decision that leaves an elementwise-only region to
#: Inductor without tuning or measuring it (docs/DECISIONS.md, "Elementwise
#: regions stay with Inductor"): over sessions 9-16 on the H200 such regions
#: won in context in 7 of 137 trials, by noise-sized margins, no whole graph
#: the guard kept for dice owed anything to one, and the one graph it kept
#: with only such a region (ResNet101, session 9) was slower, 0.93x.
ELEMENTWISE_SOURCE = "elementwise region: left to Inductor, which fuses it as well"


def elementwise_only(summary: str) -> bool:
    """True when a region's summary ("sub+mul+mul+add+relu": its IR op names,
    constants omitted) names only elementwise ops (ELEMENTWISE_IR_OPS); a
    contraction (linear), a reduction or normalisation (sum, softmax,
    layer_norm, norm, ...) or any name not in the set makes it False."""
    names = [n for n in summary.split("+") if n]
    return bool(names) and all(n in ELEMENTWISE_IR_OPS for n in names)


def elementwise_regions_measured() -> bool:
    """Whether elementwise-only regions are tuned and measured (``DICE_TORCH_ELEMENTWISE_REGIONS=1``)."""
    return os.environ.get(ELEMENTWISE_ENV, "") == "1"


def from_stored(key: str, summary: str, stored: dict[str, Any]) -> RegionDecision:
    """A RegionDecision read back from the store (source "cache")."""
    return RegionDecision(key, summary, stored.get("choice", INDUCTOR), "cache",
                          stored.get("dice_us"), stored.get("base_us"))
