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
unset _dice_root
