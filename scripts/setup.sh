#!/usr/bin/env bash
# Installs what the build needs and configures + builds into build/.
#   bash scripts/setup.sh            # CPU machine / CI: Debian packages + torch==2.11.0 from PyPI
# On the GPU machine (no registry) it uses the preinstalled torch and the
# Debian packages carried in .deps/ (made here by scripts/gpu_prepare.sh).
# Env: BUILD_DIR (default build), BUILD_TYPE (default RelWithDebInfo), JOBS,
# BUILD_TARGETS (default: every target; scripts/main.sh builds only
# "dice mlp_block", what it runs, and scripts/test.sh the rest).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
TORCH_VERSION=2.11.0
APT_PACKAGES="build-essential cmake ninja-build pkg-config libsqlite3-dev sqlite3 libssl-dev nlohmann-json3-dev
  libspdlog-dev libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libhiredis-dev libicu-dev python3-pip
  chromium"

log() { echo "[setup] $*"; }

have_headers() {
  for h in sqlite3.h openssl/evp.h nlohmann/json.hpp spdlog/spdlog.h CLI/CLI.hpp gtest/gtest.h httplib.h unicode/normalizer2.h hiredis/hiredis.h; do
    [ -e "/usr/include/$h" ] || [ -e "$ROOT/.deps/root/usr/include/$h" ] || return 1
  done
}

# 1. System packages.
# Unpacked once: dpkg -x rewrites the libraries in place, and a process that
# has them mapped (a training run beside a second build on an H200) dies of
# SIGBUS.
if [ -d "$ROOT/.deps" ] && ls "$ROOT"/.deps/*.deb >/dev/null 2>&1 && [ ! -d "$ROOT/.deps/root/usr/lib/x86_64-linux-gnu" ]; then
  log "unpacking carried Debian packages from .deps/ (no registry on this machine)"
  mkdir -p "$ROOT/.deps/root"
  for deb in "$ROOT"/.deps/*.deb; do dpkg -x "$deb" "$ROOT/.deps/root"; done
fi
if ! have_headers; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $APT_PACKAGES >/dev/null
  else
    log "missing development headers and cannot apt-get (not root?): install: $APT_PACKAGES"
    exit 1
  fi
fi
# Headless Chromium loads the cache server's dashboard in a test; installed
# with the packages above, or here when the headers were already present.
# Optional: without it (e.g. the GPU machine, no registry) that test skips.
if ! command -v chromium >/dev/null && [ ! -d "$ROOT/.deps" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  log "installing chromium (dashboard browser test)"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } \
    >/dev/null 2>&1 || log "chromium not installed; the dashboard browser test will skip"
fi
[ -x /usr/local/cuda/bin/nvcc ] || [ -e /usr/local/cuda/include/nvrtc.h ] || {
  log "CUDA toolkit not found at /usr/local/cuda (NVRTC and headers are required)"; exit 1; }

# 2. PyTorch (LibTorch comes with the wheel).
# One import of torch (~3 s) gives both its version and its CMake prefix:
# "VERSION PREFIX", empty when torch does not import.
torch_info() {
  python3 -c 'import torch,sys;sys.stdout.write(torch.__version__.split("+")[0]+" "+torch.utils.cmake_prefix_path)' \
    2>/dev/null || true
}
TORCH_INFO=$(torch_info)
if [ "${TORCH_INFO%% *}" != "$TORCH_VERSION" ]; then
  log "installing torch==$TORCH_VERSION from PyPI"
  python3 -m pip install -q "torch==$TORCH_VERSION" numpy
  TORCH_INFO=$(torch_info)
fi
[ "${TORCH_INFO%% *}" = "$TORCH_VERSION" ] || { log "torch $TORCH_VERSION is not importable by python3"; exit 1; }
if [ -d "$ROOT/.deps/wheels" ] && ! python3 -c 'import pytest, wheel' 2>/dev/null; then
  log "installing pytest from the carried wheels in .deps/wheels"
  python3 -m pip install -q --no-index --find-links "$ROOT/.deps/wheels" pytest wheel || log "pytest not installed"
fi
python3 -c 'import numpy' 2>/dev/null || python3 -m pip install -q numpy 2>/dev/null || log "numpy not installed (optional)"
TORCH_PREFIX=${TORCH_INFO#* }

# 2b. CUTLASS headers (header-only; the gemm template family's extension
# candidates include them, runtime/extension_compiler.h passes -I). Pinned
# like torch: the PyPI wheel nvidia-cutlass carries them under
# cutlass_library/source/include; never vendored in git. The wheel (6 MB) is
# kept in .deps/cutlass and travels to the GPU machine (no registry there);
# its include tree (27 MB) is unpacked into .deps/root/cutlass/include, which
# scripts/gpu_snapshot.sh leaves behind like the other unpacked files (the
# tree would push a snapshot past the device call's 64 MiB) and this step
# unpacks again there.
CUTLASS_VERSION=4.2.0.0
CUTLASS_WHEEL="$ROOT/.deps/cutlass/nvidia_cutlass-$CUTLASS_VERSION-py3-none-any.whl"
CUTLASS_INCLUDE="$ROOT/.deps/root/cutlass/include"
if [ ! -f "$CUTLASS_WHEEL" ]; then
  log "downloading nvidia-cutlass==$CUTLASS_VERSION (headers) from PyPI into .deps/cutlass"
  mkdir -p "$ROOT/.deps/cutlass"
  python3 -m pip download -q --no-deps -d "$ROOT/.deps/cutlass" "nvidia-cutlass==$CUTLASS_VERSION" ||
    log "nvidia-cutlass not downloaded: the gemm templates' candidates will not compile"
fi
if [ -f "$CUTLASS_WHEEL" ] && { [ ! -f "$CUTLASS_INCLUDE/cutlass/gemm/device/gemm.h" ] || [ ! -f "$CUTLASS_INCLUDE/cutlass/util/packed_stride.hpp" ]; }; then
  log "unpacking the CUTLASS headers into .deps/root/cutlass/include"
  mkdir -p "$(dirname "$CUTLASS_INCLUDE")"
  python3 "$ROOT/scripts/unpack_cutlass.py" "$CUTLASS_WHEEL" "$CUTLASS_INCLUDE"
fi

# 3. Configure and build.
PREFIX_PATH="$TORCH_PREFIX"
EXTRA=()
if [ -d "$ROOT/.deps/root/usr" ]; then
  PREFIX_PATH="$ROOT/.deps/root/usr;$PREFIX_PATH"
  EXTRA+=("-DCMAKE_CXX_FLAGS=-isystem $ROOT/.deps/root/usr/include")
  # DT_RPATH (not RUNPATH) so that the carried libraries' own dependencies
  # (libicuuc -> libicudata) resolve from .deps/root too, for every binary and
  # for libdice_torch_ext.so loaded by Python.
  EXTRA+=("-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags" "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags")
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
# Optional: with ccache installed, rebuilds reuse objects; another checkout
# reuses them only with CCACHE_BASEDIR set to a common parent and
# CCACHE_NOHASHDIR=1 (RelWithDebInfo objects otherwise hash the build
# directory, so a fresh clone misses them all). Not installed by this script.
command -v ccache >/dev/null && EXTRA+=("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
CONFIGURE=(cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCMAKE_PREFIX_PATH="$PREFIX_PATH"
  "${EXTRA[@]}")
# A build dir configured with exactly these arguments is not configured again
# (a second `bash scripts/main.sh` starts building at once): the build tool
# re-runs CMake by itself when a CMakeLists.txt or a globbed directory
# changes. The stamp is written only after a configure succeeded.
STAMP="$BUILD_DIR/.dice-configure-args"
if [ -f "$BUILD_DIR/CMakeCache.txt" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "${CONFIGURE[*]}" ] &&
   { [ -f "$BUILD_DIR/build.ninja" ] || [ -f "$BUILD_DIR/Makefile" ]; }; then
  log "$BUILD_DIR already configured with these arguments"
else
  log "configuring $BUILD_DIR ($BUILD_TYPE)"
  rm -f "$STAMP"
  "${CONFIGURE[@]}" >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
  printf '%s' "${CONFIGURE[*]}" >"$STAMP"
fi
# What the build will do, said before it starts; the time of a first build
# only when there is one (no dice binary yet; for the full build also no test
# binary). Ninja's dry run cannot tell: it stops at CMake's always-run glob
# check. Measured shares (2026-12-02): `dice mlp_block` is 117-122 of the
# 241-251 build steps (23 of the 59 files that include LibTorch), ~45% of
# the compile time in build/.ninja_log.
WHAT=${BUILD_TARGETS:-every target, the test suites included}
if [ ! -x "$BUILD_DIR/cli/dice" ] && [ -n "${BUILD_TARGETS:-}" ]; then
  log "building $WHAT: a first build takes 9-18 minutes on 2 free cores (more while other builds share them), 2-3 on 16 (LibTorch headers are heavy); scripts/test.sh builds the test suites"
elif [ ! -x "$BUILD_DIR/cli/dice" ]; then
  log "building $WHAT: a first build takes 20-25 minutes on 2 cores, 3-4 on 16 (LibTorch headers are heavy)"
elif [ -z "${BUILD_TARGETS:-}" ] && [ ! -x "$BUILD_DIR/tests/cli_tests" ]; then
  log "building $WHAT: the test suites' first build takes 11-14 minutes on 2 cores, 2-3 on 16"
else
  log "checking $BUILD_DIR ($WHAT): only what changed is rebuilt (quick with ccache installed)"
fi
BUILD_LOG="$BUILD_DIR.build.log"
# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" ${BUILD_TARGETS:+--target $BUILD_TARGETS} 2>&1 | tee "$BUILD_LOG"
if grep -q "no work to do" "$BUILD_LOG"; then log "$BUILD_DIR was up to date: nothing built"; fi
log "done: $BUILD_DIR/cli/dice"
