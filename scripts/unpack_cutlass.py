#!/usr/bin/env python3
"""Unpacks the CUTLASS include tree of an nvidia-cutlass wheel.

    python3 scripts/unpack_cutlass.py WHEEL DEST

Copies every file under cutlass_library/source/include/ of WHEEL (a zip) to
DEST (e.g. .deps/cutlass/include, holding cutlass/ and cute/), and the files
under cutlass_library/source/tools/util/include/ (cutlass/util/: the sm90
conv mainloop includes cutlass/util/packed_stride.hpp) into the same DEST. Writes into
DEST.tmp first and renames it, so an interrupted run leaves no half tree.
Used by scripts/setup.sh and scripts/deps_env.sh (no `unzip` needed).
"""
import os
import shutil
import sys
import zipfile

PREFIXES = ("cutlass_library/source/include/", "cutlass_library/source/tools/util/include/")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    wheel, dest = sys.argv[1], sys.argv[2].rstrip("/")
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    count = 0
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            prefix = next((p for p in PREFIXES if name.startswith(p)), None)
            if prefix is None or name.endswith("/"):
                continue
            out = os.path.join(tmp, name[len(prefix):])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            count += prefix == PREFIXES[0]
    if count == 0:  # the util tree alone is not CUTLASS
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"unpack_cutlass: no {PREFIXES[0]} in {wheel}", file=sys.stderr)
        return 1
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(tmp, dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
