# Sourced by the scripts that run built binaries (gpu_check.sh, main.sh,
# bench/run_chunk.sh): on the GPU machine the carried Debian libraries live in
# .deps/root (scripts/gpu_prepare.sh + setup.sh), outside the loader's default
# paths; the RPATHs CMake writes miss some of them (cpp-httplib, ICU's data).
# A device call's `carry` replaces .deps wholesale, so a build kept from an
# earlier call can find .deps/root gone: unpack the carried .debs again.
_dice_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ ! -d "$_dice_root/.deps/root/usr/lib/x86_64-linux-gnu" ] && ls "$_dice_root"/.deps/*.deb >/dev/null 2>&1; then
  mkdir -p "$_dice_root/.deps/root"
  for _deb in "$_dice_root"/.deps/*.deb; do dpkg -x "$_deb" "$_dice_root/.deps/root"; done
  unset _deb
fi
if [ -d "$_dice_root/.deps/root/usr/lib/x86_64-linux-gnu" ]; then
  export LD_LIBRARY_PATH="$_dice_root/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# The CUTLASS headers (setup.sh step 2b) for extension candidates compiled
# at run time (runtime/extension_compiler.h reads $DICE_CUTLASS_INCLUDE):
# unpacked again from the carried wheel (.deps/cutlass) into .deps/root when
# a carry dropped the tree.
_dice_cutlass_whl=$(ls "$_dice_root"/.deps/cutlass/nvidia_cutlass-*.whl 2>/dev/null | head -1)
if [ -n "$_dice_cutlass_whl" ] && { [ ! -f "$_dice_root/.deps/root/cutlass/include/cutlass/gemm/device/gemm.h" ] ||
   [ ! -f "$_dice_root/.deps/root/cutlass/include/cutlass/util/packed_stride.hpp" ]; }; then
  mkdir -p "$_dice_root/.deps/root/cutlass"
  python3 "$_dice_root/scripts/unpack_cutlass.py" "$_dice_cutlass_whl" "$_dice_root/.deps/root/cutlass/include" || true
fi
if [ -z "${DICE_CUTLASS_INCLUDE:-}" ] && [ -f "$_dice_root/.deps/root/cutlass/include/cutlass/gemm/device/gemm.h" ]; then
  export DICE_CUTLASS_INCLUDE="$_dice_root/.deps/root/cutlass/include"
fi
unset _dice_cutlass_whl
unset _dice_root
