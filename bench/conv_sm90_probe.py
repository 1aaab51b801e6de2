#!/usr/bin/env python3
"""Can Hopper's own conv kernels beat cuDNN? (issue 18 item 2, a probe, not a dice path.)

The conv template family runs CUTLASS 2.x implicit GEMM (sm80 tensor ops). On
the H200 it is 0.63-0.68x of torch.compile on level-2 conv tasks, because
cuDNN's channels_last conv is about 1.9x faster (docs/PERF.md, session 16).
This probe times CUTLASS 3.x's sm90 implicit-GEMM fprop (TMA im2col, wgmma
TF32; bench/conv_sm90_probe.cu, built by nvcc -arch=sm_90a once per
configuration and called through ctypes) with a fused epilogue, against:
  - eager      F.conv2d on NCHW tensors, then the epilogue ops;
  - eager_cl   the same on channels_last tensors (cuDNN's NHWC kernels);
  - compile    torch.compile of the same function on NCHW inputs (Inductor's
               layout choice plus its fused epilogue kernel): the reference;
  - sm90/<cfg> the CUTLASS kernel on NHWC tensors prepared outside the timed
               region, and sm90/<cfg>+cvt with x converted to NHWC inside it
               (what a graph with NCHW activations would pay).
The epilogues are: "none" (conv + bias), "relu" (conv + bias, then ReLU) and
"mish2" (conv + bias, then Mish twice, which cuDNN cannot fuse).

Precision: float32 inputs, TF32 math in every variant (PyTorch's default
torch.backends.cudnn.allow_tf32 = True for convolutions). Each output is
compared with a float64 reference; "correct" means the max abs error is at
most 2x eager's own (TF32) error plus 1e-6.
Timing: CUDA events, 3 warm-ups, a 256 MB write flushing L2 before every call,
round-robin over the variants, median of --reps, µs.
Output: one JSON line per (shape, epilogue, impl) to --out with task,
epilogue, impl, us, speedup_vs_compile (compile µs / this µs), correct,
max_abs_err; a table on stdout.

Usage (GPU machine, ~2-4 min of nvcc on 16 cores, then ~1 min of timing):
    python3 bench/conv_sm90_probe.py --out $OUT/conv_sm90.jsonl
    python3 bench/conv_sm90_probe.py --compile-only      # any machine with nvcc: builds the configs
Errors: exits 2 when nvcc or the CUTLASS headers are missing, or (without
--compile-only) when there is no CUDA device; a configuration that fails to
build or to run is reported with its cause and skipped.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "conv_sm90_probe.cu"

#: (label, N, C, H, W, K, R, S, pad, stride): the convolutions of the level-2
#: conv tasks of issue 17's list (KernelBench level2 1/52/46, 4/32, 54) and a
#: ResNet-style 3x3 at 56x56.
SHAPES = [
    ("l2/1 128x64x128x128 k128", 128, 64, 128, 128, 128, 3, 3, 0, 1),
    ("l2/4 64x64x256x256 k128", 64, 64, 256, 256, 128, 3, 3, 0, 1),
    ("l2/54 64x64x256x256 k64", 64, 64, 256, 256, 64, 3, 3, 0, 1),
    ("resnet 32x64x56x56 k64 p1", 32, 64, 56, 56, 64, 3, 3, 1, 1),
]
#: (TM, TN, TK, CM): threadblock tile (output pixels x output channels x
#: input-channel slice, TK 32 floats = 128 bytes) and cluster size along M.
CONFIGS = [(128, 128, 32, 1), (128, 64, 32, 1), (128, 128, 32, 2), (64, 128, 32, 1)]
EPILOGUES = {"none": 0, "relu": 1, "mish2": 2}


def cutlass_includes(root: Path) -> list[str]:
    """-I flags for CUTLASS's include tree and its tools/util tree (the sm90
    conv mainloop includes cutlass/util/packed_stride.hpp), from
    $DICE_CUTLASS_INCLUDE or .deps/root/cutlass/include (scripts/setup.sh).
    Raises FileNotFoundError naming what is missing."""
    inc = Path(os.environ.get("DICE_CUTLASS_INCLUDE", root / ".deps/root/cutlass/include"))
    if not (inc / "cutlass/conv/collective/collective_builder.hpp").is_file():
        raise FileNotFoundError(f"CUTLASS headers not found under {inc} (run scripts/setup.sh)")
    if not (inc / "cutlass/util/packed_stride.hpp").is_file():
        raise FileNotFoundError(f"{inc}/cutlass/util/packed_stride.hpp missing: unpack the wheel again "
                                "(scripts/unpack_cutlass.py also copies tools/util/include)")
    return [f"-I{inc}"]


def build(cfg: tuple, epi: int, build_dir: Path, includes: list[str]) -> tuple[Path | None, str]:
    """Builds one configuration into build_dir (kept by the hash of the source
    and flags). Returns (path of the .so, "") or (None, nvcc's first error lines)."""
    tm, tn, tk, cm = cfg
    flags = ["-std=c++17", "-O3", "-arch=sm_90a", "--expt-relaxed-constexpr", "-shared", "-Xcompiler", "-fPIC",
             f"-DTM={tm}", f"-DTN={tn}", f"-DTK={tk}", f"-DCM={cm}", f"-DEPI={epi}"] + includes
    digest = hashlib.sha256((SOURCE.read_text() + " ".join(flags)).encode()).hexdigest()[:16]
    out = build_dir / f"conv_sm90_{tm}x{tn}x{tk}_c{cm}_e{epi}_{digest}.so"
    if out.is_file():
        return out, ""
    tmp = out.with_suffix(".tmp.so")
    proc = subprocess.run(["nvcc", *flags, str(SOURCE), "-o", str(tmp)], capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [l for l in (proc.stderr + proc.stdout).splitlines() if "error" in l]
        return None, "\n".join(lines[:3]) or proc.stderr[-400:]
    tmp.rename(out)
    return out, ""


def build_all(configs: list, build_dir: Path, jobs: int, root: Path) -> dict:
    """{(cfg, epilogue name): (so path | None, error)} for every configuration
    of ``configs`` and every epilogue, nvcc in parallel."""
    includes = cutlass_includes(root)
    build_dir.mkdir(parents=True, exist_ok=True)
    todo = [(cfg, name) for cfg in configs for name in EPILOGUES]
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = {ex.submit(build, cfg, EPILOGUES[name], build_dir, includes): (cfg, name) for cfg, name in todo}
        return {futs[f]: f.result() for f in cf.as_completed(futs)}


def cfg_name(cfg: tuple) -> str:
    tm, tn, tk, cm = cfg
    return f"{tm}x{tn}x{tk}" + (f"_c{cm}" if cm > 1 else "")


def run_probe(built: dict, configs: list, args) -> list[dict]:
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default, stated
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")

    def mish(t):
        return F.mish(t)

    epi_fns = {"none": lambda y: y, "relu": torch.relu, "mish2": lambda y: mish(mish(y))}
    rows = []
    for label, n, c, h, w, k, r, s, pad, stride in SHAPES:
        torch.manual_seed(0)
        x = torch.randn(n, c, h, w, device="cuda")
        wt = torch.randn(k, c, r, s, device="cuda") / (c * r * s) ** 0.5
        b = torch.randn(k, device="cuda") * 0.1
        x_cl, w_cl = x.contiguous(memory_format=torch.channels_last), wt.contiguous(memory_format=torch.channels_last)
        p = (h + 2 * pad - r) // stride + 1
        q = (w + 2 * pad - s) // stride + 1
        stream = torch.cuda.current_stream().cuda_stream
        for ename, efn in epi_fns.items():
            def fn(xx, ww, efn=efn):
                return efn(F.conv2d(xx, ww, b, stride=stride, padding=pad))

            compiled = torch.compile(fn)
            with torch.no_grad():
                ref = efn(F.conv2d(x.double(), wt.double(), b.double(), stride=stride, padding=pad))
            variants = {"eager": lambda fn=fn: fn(x, wt), "eager_cl": lambda fn=fn: fn(x_cl, w_cl),
                        "compile": lambda c_=compiled: c_(x, wt)}
            errors = {}
            for cfg in configs:
                so, err = built[(cfg, ename)]
                if so is None:
                    errors[cfg_name(cfg)] = "build: " + err
                    continue
                lib = ctypes.CDLL(str(so))
                lib.dice_probe_run.restype = ctypes.c_int
                lib.dice_probe_run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 9 + [ctypes.c_void_p]
                out = torch.empty(n, k, p, q, device="cuda", memory_format=torch.channels_last)

                def call(xx, lib=lib, out=out):
                    rc = lib.dice_probe_run(xx.data_ptr(), w_cl.data_ptr(), b.data_ptr(), out.data_ptr(),
                                            n, h, w, c, k, r, s, pad, stride, stream)
                    if rc:
                        raise RuntimeError(f"dice_probe_run returned {rc}")
                    return out

                try:
                    call(x_cl)
                    torch.cuda.synchronize()
                except RuntimeError as e:
                    errors[cfg_name(cfg)] = "run: " + str(e)
                    continue
                variants["sm90/" + cfg_name(cfg)] = lambda call=call: call(x_cl)
                variants["sm90/" + cfg_name(cfg) + "+cvt"] = \
                    lambda call=call: call(x.contiguous(memory_format=torch.channels_last))
            errs, times = {}, {v: [] for v in variants}
            with torch.no_grad():
                for v, f in variants.items():
                    errs[v] = (f().double() - ref).abs().max().item()  # the compile variant compiles here
                    for _ in range(2):
                        f()
                torch.cuda.synchronize()
                names = list(variants)
                for rep in range(args.reps):
                    for v in names[rep % len(names):] + names[:rep % len(names)]:
                        flush.zero_()
                        s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s0.record()
                        variants[v]()
                        s1.record()
                        s1.synchronize()
                        times[v].append(s0.elapsed_time(s1) * 1000.0)
            med = {v: sorted(t)[len(t) // 2] for v, t in times.items()}
            for v in names:
                rows.append({"task": label, "epilogue": ename, "impl": v, "us": med[v],
                             "speedup_vs_compile": med["compile"] / med[v], "correct": errs[v] <= 2 * errs["eager"] + 1e-6,
                             "max_abs_err": errs[v]})
            for cfgn, e in errors.items():
                rows.append({"task": label, "epilogue": ename, "impl": "sm90/" + cfgn, "error": e})
            del compiled
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="conv_sm90.jsonl")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--build-dir", default=os.environ.get("DICE_PROBE_BUILD_DIR", "/tmp/dice-conv-sm90"))
    ap.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1))
    ap.add_argument("--compile-only", action="store_true", help="only build the configurations (no GPU needed)")
    ap.add_argument("--configs", default="", help="comma list of configurations to keep (e.g. 128x128x32,128x64x32); "
                    "default: all of " + ",".join(cfg_name(c) for c in CONFIGS))
    args = ap.parse_args(argv)
    if args.configs:
        keep = set(args.configs.split(","))
        unknown = keep - {cfg_name(c) for c in CONFIGS}
        if unknown:
            print(f"conv_sm90_probe: unknown configuration(s) {sorted(unknown)}", file=sys.stderr)
            return 2
    configs = [c for c in CONFIGS if not args.configs or cfg_name(c) in args.configs.split(",")]
    if shutil.which("nvcc") is None:
        print("conv_sm90_probe: nvcc not on PATH", file=sys.stderr)
        return 2
    try:
        built = build_all(configs, Path(args.build_dir), args.jobs, HERE.parent)
    except FileNotFoundError as e:
        print(f"conv_sm90_probe: {e}", file=sys.stderr)
        return 2
    for (cfg, ename), (so, err) in sorted(built.items()):
        print(f"build {cfg_name(cfg):>12} {ename:>5}: {'ok' if so else 'FAILED ' + err}", flush=True)
    if args.compile_only:
        return 0 if all(so for so, _ in built.values()) else 1
    import torch
    if not torch.cuda.is_available():
        print("conv_sm90_probe: no CUDA device (use --compile-only)", file=sys.stderr)
        return 2
    rows = run_probe(built, configs, args)
    with open(args.out, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"| shape | epilogue | impl | µs | vs compile | correct | max abs err |\n|---|---|---|---:|---:|---|---:|")
    for row in rows:
        if "error" in row:
            print(f"| {row['task']} | {row['epilogue']} | {row['impl']} | - | - | - | {row['error'][:80]} |")
        else:
            print(f"| {row['task']} | {row['epilogue']} | {row['impl']} | {row['us']:.0f} | "
                  f"{row['speedup_vs_compile']:.3f} | {row['correct']} | {row['max_abs_err']:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
