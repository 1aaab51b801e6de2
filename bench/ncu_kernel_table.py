#!/usr/bin/env python3
"""Per-forward kernel table of a decode from two Nsight Compute runs (issue 19).

There is no nsys on the device image, and the decoder marks no ranges, so
the kernels of one step forward are found by difference: the same decode is
profiled twice, with N1 and N2 new tokens (same prompt, batch and steps;
CUDA graphs off, so every kernel launch is seen). Both runs share the
prefill and everything before it; the second has (N2 - N1) / tokens_per_forward
more forwards, each with its sampling. Subtracting the first run's kernels
from the second's, per (kernel name, grid), and dividing by that count gives
the mean kernels of one forward plus its sampling, in µs.

    ncu --csv --print-units base --clock-control none --metrics gpu__time_duration.sum \\
        ./build/bench/sdar_decode_bench ... --new 4 > a.csv
    ncu ... --new 8 > b.csv
    python3 bench/ncu_kernel_table.py a.csv b.csv --forwards 4 [--top 30]

Input: ncu's CSV pages ("ID","Process ID",...,"Kernel Name",...,"Grid Size",
...,"Metric Name","Metric Unit","Metric Value"); other lines (the program's
own output, ==PROF== notes) are skipped. Units: nsecond, usecond, msecond or
second. Output: a table sorted by µs per forward (kernel, grid, launches per
forward, µs per forward, µs per launch, share), then the total. Rows whose
difference is not positive (run-to-run noise in kernels both runs share)
are left out and counted in the footer. Exit codes: 0, 2 for bad input
(a file with no kernel rows, --forwards < 1).
"""
import argparse
import collections
import csv
import io
import sys

UNIT_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def read_kernels(text: str) -> dict:
    """{(kernel name, grid): [launches, total µs]} of one ncu --csv output.
    Raises ValueError for a row whose unit is unknown or a file without a
    gpu__time_duration row."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    out: dict = collections.defaultdict(lambda: [0, 0.0])
    header = None
    for row in csv.reader(io.StringIO("\n".join(lines))):
        if row and row[0] == "ID":
            header = {name: i for i, name in enumerate(row)}
            continue
        if header is None or len(row) < len(header):
            continue
        if not row[header["Metric Name"]].startswith("gpu__time_duration"):
            continue
        unit = row[header["Metric Unit"]].strip()
        if unit not in UNIT_US:
            raise ValueError(f"unknown time unit '{unit}'")
        value = float(row[header["Metric Value"]].replace(",", ""))
        key = (row[header["Kernel Name"]], row[header.get("Grid Size", header["Kernel Name"])])
        out[key][0] += 1
        out[key][1] += value * UNIT_US[unit]
    if not out:
        raise ValueError("no gpu__time_duration rows (was ncu run with --csv --metrics gpu__time_duration.sum?)")
    return dict(out)


def per_forward(base: dict, more: dict, forwards: int) -> tuple[list, int]:
    """Rows (name, grid, launches per forward, µs per forward) of more - base,
    divided by ``forwards``, sorted by µs descending; and how many keys had no
    positive difference (left out)."""
    rows, dropped = [], 0
    for key in set(base) | set(more):
        n = more.get(key, [0, 0.0])[0] - base.get(key, [0, 0.0])[0]
        us = more.get(key, [0, 0.0])[1] - base.get(key, [0, 0.0])[1]
        if n <= 0 or us <= 0:
            dropped += 1
            continue
        rows.append((key[0], key[1], n / forwards, us / forwards))
    rows.sort(key=lambda r: -r[3])
    return rows, dropped


def format_table(rows: list, dropped: int, top: int) -> str:
    """Markdown table of the first ``top`` rows, then the total over all rows."""
    total = sum(r[3] for r in rows) or 1.0
    out = ["| kernel | grid | launches / forward | µs / forward | µs / launch | share |", "|---|---|---:|---:|---:|---:|"]
    for name, grid, n, us in rows[:top]:
        out.append(f"| {name[:70]} | {grid} | {n:.2f} | {us:.1f} | {us / n:.2f} | {us / total:.1%} |")
    out.append(f"\ntotal: {total:.1f} µs per forward (with its sampling) over {len(rows)} kernel kinds; "
               f"{dropped} kinds without a positive difference left out")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", help="ncu --csv output of the shorter decode")
    p.add_argument("more", help="ncu --csv output of the longer decode")
    p.add_argument("--forwards", type=int, required=True, help="how many more forwards the longer decode runs")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    if args.forwards < 1:
        print("ncu_kernel_table: --forwards must be >= 1", file=sys.stderr)
        return 2
    try:
        with open(args.base) as f:
            base = read_kernels(f.read())
        with open(args.more) as f:
            more = read_kernels(f.read())
    except (OSError, ValueError) as e:
        print(f"ncu_kernel_table: {e}", file=sys.stderr)
        return 2
    rows, dropped = per_forward(base, more, args.forwards)
    print(format_table(rows, dropped, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
