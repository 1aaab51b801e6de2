#!/usr/bin/env python3
"""CPU test of bench/ncu_kernel_table.py on synthetic ncu --csv pages: the
per-forward table is the longer run minus the shorter, divided by the
forwards between them; program output between the CSV lines is skipped; bad
input exits 2 with the cause."""
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import ncu_kernel_table as t  # noqa: E402

HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def page(kernels):
    """ncu-like CSV for [(name, grid, ns)], with the program's own lines between."""
    lines = ["==PROF== Connected to process 1", "config batch prompt new", HEAD]
    for i, (name, grid, ns) in enumerate(kernels):
        lines.append(f'"{i}","1","bench","h","{name}","1","7","(128, 1, 1)","{grid}","0","9.0",'
                     f'"Command line profiler metrics","gpu__time_duration.sum","nsecond","{ns:,}"')
        if i == 1:
            lines.append(".deps/sdar/config-4b.json 128 512 4 0.9 1000.0")
    return "\n".join(lines) + "\n"


def check(cond, what):
    if not cond:
        print(f"ncu_kernel_table_test: FAILED: {what}")
        sys.exit(1)


prefill = [("gemm_big", "(2, 66, 1)", 186000), ("embed", "(4, 1, 1)", 2000)]
forward = [("embed", "(4, 1, 1)", 2000), ("gemm", "(4, 26, 1)", 29700), ("gemm", "(4, 26, 1)", 30300),
           ("add_rmsnorm", "(4, 1, 1)", 8000)]
base = t.read_kernels(page(prefill + forward * 4))
more = t.read_kernels(page(prefill + forward * 8))
check(base[("gemm", "(4, 26, 1)")] == [8, 240000 * 1e-3], f"base gemm {base[('gemm', '(4, 26, 1)')]}")
rows, dropped = t.per_forward(base, more, 4)
by = {(r[0], r[1]): r for r in rows}
check(dropped == 1, f"the prefill-only kernel is the one left out, got {dropped}")
check(abs(by[("gemm", "(4, 26, 1)")][2] - 2.0) < 1e-9 and abs(by[("gemm", "(4, 26, 1)")][3] - 60.0) < 1e-9,
      f"gemm per forward {by[('gemm', '(4, 26, 1)')]}")
check(abs(by[("embed", "(4, 1, 1)")][3] - 2.0) < 1e-9, "embed per forward")
check(rows[0][0] == "gemm", "sorted by µs per forward")
table = t.format_table(rows, dropped, 10)
check("total: 70.0 µs per forward" in table, table)

with tempfile.TemporaryDirectory() as d:
    a, b, empty = Path(d, "a.csv"), Path(d, "b.csv"), Path(d, "e.csv")
    a.write_text(page(prefill + forward * 4))
    b.write_text(page(prefill + forward * 8))
    empty.write_text("==PROF== no kernels profiled\n")
    ok = subprocess.run([sys.executable, str(ROOT / "bench/ncu_kernel_table.py"), str(a), str(b), "--forwards", "4"],
                        capture_output=True, text=True)
    check(ok.returncode == 0 and "| gemm | (4, 26, 1) | 2.00 | 60.0 |" in ok.stdout, ok.stdout + ok.stderr)
    bad = subprocess.run([sys.executable, str(ROOT / "bench/ncu_kernel_table.py"), str(empty), str(b), "--forwards", "4"],
                         capture_output=True, text=True)
    check(bad.returncode == 2 and "no gpu__time_duration rows" in bad.stderr, bad.stderr)
    unit = subprocess.run([sys.executable, str(ROOT / "bench/ncu_kernel_table.py"), str(a), str(b), "--forwards", "0"],
                          capture_output=True, text=True)
    check(unit.returncode == 2, "--forwards 0 is refused")
print("ncu_kernel_table_test: all checks passed")
