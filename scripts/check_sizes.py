#!/usr/bin/env python3
"""Source size limits of issue 16 ("Done when"), as a CI check.

No source file (C++ and Python) under any source folder of the checkout
(runtime/, torch_ext/, cache/, core/, generator/, cli/, training/, bench/,
scripts/, examples/; not tests/) may be over 700 lines, and no function there
over 150 lines. Issue 16 set the limits for runtime/, torch_ext/ and cache/;
they now hold for every source folder. Function extents come from lizard
(https://github.com/terryyin/lizard), pinned to 1.17.13 and installed by
scripts/test.sh; its `length` is the one `lizard -L 150` checks (first to
last line of the function, comments and blank lines included).

    python3 scripts/check_sizes.py                 # check the default dirs of this checkout
    python3 scripts/check_sizes.py --root R a b    # check R/a and R/b
    python3 scripts/check_sizes.py --self-test     # show that an oversized synthetic file is flagged

Prints one line per violation ("path: N lines (limit 700)",
"path:LINE: function NAME is N lines (limit 150)"), then a summary.
Exit codes: 0 within the limits (or the self-test passed), 1 a violation
(or the self-test failed), 2 bad usage (a directory that does not exist,
lizard not installed).
"""

import argparse
import os
import sys
import tempfile

LIZARD_VERSION = "1.17.13"
DEFAULT_DIRS = ("runtime", "torch_ext", "cache", "core", "generator", "cli", "training", "bench", "scripts",
                "examples")
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 150

# What counts as source. CUDA files are read as C++ (lizard does not know .cu).
CXX_EXTS = {".cc", ".cpp", ".cxx", ".c", ".h", ".hpp", ".hh", ".cu", ".cuh"}
PY_EXTS = {".py"}
# Directories never walked: build outputs, caches, package metadata.
SKIP_DIRS = {"__pycache__", "build", "dist", ".pytest_cache", ".mypy_cache"}


def import_lizard():
    try:
        import lizard  # noqa: WPS433 (imported late so --help works without it)
    except ImportError:
        print(f"check_sizes: lizard is not installed (python3 -m pip install lizard=={LIZARD_VERSION}; "
              "scripts/test.sh does it)", file=sys.stderr)
        sys.exit(2)
    try:
        from lizard_ext.version import version
    except ImportError:
        version = "unknown"
    if version != LIZARD_VERSION:
        print(f"check_sizes: warning: lizard {version}, the check is pinned to {LIZARD_VERSION}", file=sys.stderr)
    return lizard


def source_files(directory):
    """Every C++/Python source file below `directory`, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith(".") and not d.endswith(".egg-info"))
        for name in sorted(filenames):
            if os.path.splitext(name)[1] in CXX_EXTS | PY_EXTS:
                out.append(os.path.join(dirpath, name))
    return out


def check_file(lizard, path, shown, max_file_lines, max_function_lines):
    """Violation lines for one file; `shown` is the path printed."""
    with open(path, encoding="utf-8", errors="replace") as f:
        code = f.read()
    problems = []
    lines = code.count("\n") + (0 if code.endswith("\n") or not code else 1)
    if lines > max_file_lines:
        problems.append(f"{shown}: {lines} lines (limit {max_file_lines})")
    ext = os.path.splitext(path)[1]
    as_name = path if ext not in {".cu", ".cuh"} else path + ".cc"
    info = lizard.analyze_file.analyze_source_code(as_name, code)
    for fn in info.function_list:
        if fn.length > max_function_lines:
            problems.append(f"{shown}:{fn.start_line}: function {fn.name} is {fn.length} lines "
                            f"(limit {max_function_lines})")
    return problems


def run_check(root, dirs, max_file_lines, max_function_lines):
    """Returns (violation lines, number of files checked); exits 2 on a missing directory."""
    lizard = import_lizard()
    problems, checked = [], 0
    for d in dirs:
        full = os.path.join(root, d)
        if not os.path.isdir(full):
            print(f"check_sizes: {full} is not a directory", file=sys.stderr)
            sys.exit(2)
        for path in source_files(full):
            checked += 1
            problems += check_file(lizard, path, os.path.relpath(path, root), max_file_lines, max_function_lines)
    return problems, checked


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def cxx_function(name, body_lines):
    """A C++ function spanning body_lines + 2 lines (signature and closing brace)."""
    body = "".join(f"  x += {i};\n" for i in range(body_lines))
    return f"int {name}(int x) {{\n{body}  return x;\n}}\n"


def py_function(name, body_lines):
    body = "".join(f"    x += {i}\n" for i in range(body_lines))
    return f"def {name}(x):\n{body}    return x\n"


def self_test():
    """Builds a synthetic tree with known violations and checks each is reported, and nothing else."""
    with tempfile.TemporaryDirectory(prefix="check-sizes-") as root:
        for d in DEFAULT_DIRS:  # the default dirs, as the real check walks them (most left empty)
            os.makedirs(os.path.join(root, d))
        # Within the limits: a 150-line function in a 700-line file.
        ok = cxx_function("FitsExactly", 147)  # 1 + 147 + 1 + 1 = 150 lines
        write(os.path.join(root, "runtime", "ok.cc"), ok + "// pad\n" * (700 - ok.count("\n")))
        # Over: a 151-line C++ function, a 151-line Python function, a 701-line header.
        write(os.path.join(root, "runtime", "long_function.cc"), "// lead\n" + cxx_function("TooLong", 148))
        write(os.path.join(root, "torch_ext", "python", "long.py"), py_function("too_long_py", 149))
        write(os.path.join(root, "cache", "big.h"), "// line\n" * 701)
        # Not source, or not walked: never reported.
        write(os.path.join(root, "cache", "notes.txt"), "x\n" * 5000)
        write(os.path.join(root, "cache", "__pycache__", "gen.py"), "# x\n" * 5000)
        problems, checked = run_check(root, DEFAULT_DIRS, MAX_FILE_LINES, MAX_FUNCTION_LINES)
        expected = [
            "runtime/long_function.cc:2: function TooLong is 151 lines (limit 150)",
            os.path.join("torch_ext", "python", "long.py") + ":1: function too_long_py is 151 lines (limit 150)",
            "cache/big.h: 701 lines (limit 700)",
        ]
        failures = []
        for want in expected:
            if want not in problems:
                failures.append(f"not reported: {want}")
        for got in problems:
            if got not in expected:
                failures.append(f"reported but within the limits: {got}")
        if checked != 4:
            failures.append(f"checked {checked} files, expected 4 (ok.cc, long_function.cc, long.py, big.h)")
        for line in problems:
            print(f"  (synthetic) {line}")
        if failures:
            for f in failures:
                print(f"check_sizes --self-test: FAIL: {f}")
            return 1
        print(f"check_sizes --self-test: ok ({len(expected)} synthetic violations reported, the 150-line "
              "function in a 700-line file and the skipped files not)")
        return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="*", default=list(DEFAULT_DIRS),
                   help="directories relative to --root (default: " + " ".join(DEFAULT_DIRS) + ")")
    p.add_argument("--root", default=os.path.dirname(here), help="checkout root (default: this script's ..)")
    p.add_argument("--max-file-lines", type=int, default=MAX_FILE_LINES)
    p.add_argument("--max-function-lines", type=int, default=MAX_FUNCTION_LINES)
    p.add_argument("--self-test", action="store_true", help="check a synthetic tree with known violations instead")
    args = p.parse_args()
    if args.self_test:
        return self_test()
    problems, checked = run_check(args.root, args.dirs, args.max_file_lines, args.max_function_lines)
    for line in problems:
        print(line)
    if problems:
        print(f"check_sizes: {len(problems)} violation(s) in {checked} source files under "
              f"{', '.join(args.dirs)} (limits: {args.max_file_lines} lines per file, "
              f"{args.max_function_lines} per function)")
        return 1
    print(f"check_sizes: ok, {checked} source files under {', '.join(args.dirs)} within "
          f"{args.max_file_lines} lines per file and {args.max_function_lines} per function")
    return 0


if __name__ == "__main__":
    sys.exit(main())
