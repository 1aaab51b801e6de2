"""Shared by the KernelBench converter tests (tests/examples/converter_*.py):
runs examples/make_kernelbench_models.py --small on one task source written
into a KernelBench-like folder, and reads the meta.json it writes."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def convert(tmp: str, level: str, name: str, source: str, *flags: str, suffix: str = "",
            stdout: list | None = None) -> dict | None:
    """Writes ``source`` as <tmp>/<level>/<name>.py and converts it with
    ``--small`` plus ``flags`` into <tmp>/models. Returns the task's
    meta.json (dict) from <tmp>/models/<level>_<name><suffix> (``--dtype
    bf16`` writes suffix "_bf16"), or None after printing the converter's
    output when it exits non-zero. ``stdout``, when given, receives the
    converter's standard output lines."""
    folder = os.path.join(tmp, level)
    os.makedirs(folder, exist_ok=True)
    task = os.path.join(folder, name + ".py")
    with open(task, "w") as f:
        f.write(source)
    out = os.path.join(tmp, "models")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_kernelbench_models.py"), task,
                        "--out", out, "--small", *flags], capture_output=True, text=True)
    if stdout is not None:
        stdout.extend(r.stdout.splitlines())
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        return None
    with open(os.path.join(out, f"{level}_{name}{suffix}", "meta.json")) as f:
        return json.load(f)
