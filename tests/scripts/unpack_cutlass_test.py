#!/usr/bin/env python3
"""scripts/unpack_cutlass.py on a small fake wheel: the include tree and the
tools/util include tree land in one DEST (bench/conv_sm90_probe.cu and any
sm90 conv source need cutlass/util/packed_stride.hpp beside cutlass/), other
files of the wheel do not, and a wheel without the include tree is an error
that leaves DEST as it was. Exits non-zero on the first failed check."""
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "unpack_cutlass.py"


def unpack(wheel: Path, dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(wheel), str(dest)], capture_output=True, text=True)


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        wheel = d / "nvidia_cutlass-0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr("cutlass_library/source/include/cutlass/gemm/device/gemm.h", "// gemm\n")
            z.writestr("cutlass_library/source/include/cute/tensor.hpp", "// cute\n")
            z.writestr("cutlass_library/source/tools/util/include/cutlass/util/packed_stride.hpp", "// util\n")
            z.writestr("cutlass_library/source/tools/util/CMakeLists.txt", "# not a header\n")
            z.writestr("cutlass_library/generator.py", "# not a header\n")
        dest = d / "inc"
        r = unpack(wheel, dest)
        assert r.returncode == 0, r.stderr
        got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
        want = ["cute/tensor.hpp", "cutlass/gemm/device/gemm.h", "cutlass/util/packed_stride.hpp"]
        assert got == want, got
        assert (dest / "cutlass/util/packed_stride.hpp").read_text() == "// util\n"
        assert not Path(str(dest) + ".tmp").exists(), "the temporary tree was left behind"

        bad = d / "bad.whl"
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("cutlass_library/source/tools/util/include/cutlass/util/x.hpp", "// only util\n")
        r = unpack(bad, dest)
        assert r.returncode != 0, "a wheel without the include tree must fail"
        assert "no cutlass_library/source/include/" in r.stderr, r.stderr
        got_after = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
        assert got_after == want, f"a failed unpack changed DEST: {got_after}"
    print("unpack_cutlass_test: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
