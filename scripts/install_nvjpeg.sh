#!/usr/bin/env bash
# Installs nvJPEG (for mirror-train --decode gpu) where CMake looks for it, when the CUDA toolkit
# is present but lacks it (a toolkit assembled from NVIDIA's wheels has no nvJPEG): NVIDIA's
# nvidia-nvjpeg wheel for the toolkit's CUDA major version, unpacked into /opt/mirror/nvjpeg
# (include/nvjpeg.h, lib/libnvjpeg.so.N). Without nvcc, or with nvjpeg.h beside the toolkit, it
# does nothing. Idempotent; called by scripts/setup.sh. A failure only warns: --decode gpu then
# says that this build has no nvJPEG.
set -uo pipefail
prefix="${MIRROR_NVJPEG_DIR:-/opt/mirror/nvjpeg}"
nvcc="$(command -v nvcc || echo "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc")"
[ -x "$nvcc" ] || exit 0
toolkit="$(cd "$(dirname "$nvcc")/.." && pwd)"
for dir in "$toolkit/include" "$toolkit/targets/x86_64-linux/include" "$prefix/include"; do
  [ -f "$dir/nvjpeg.h" ] && exit 0
done
major="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
[ -n "$major" ] || { echo "install_nvjpeg: cannot tell nvcc's CUDA version" >&2; exit 0; }
case "$major" in
  12) wheel="nvidia-nvjpeg-cu12" sub="nvidia/nvjpeg" ;;
  *) wheel="nvidia-nvjpeg==${major}.*" sub="nvidia/cu${major}" ;;
esac
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "install_nvjpeg: $wheel into $prefix"
if ! python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" "$wheel"; then
  echo "install_nvjpeg: could not download $wheel; --decode gpu will be unavailable" >&2
  exit 0
fi
python3 -m zipfile -e "$tmp"/*.whl "$tmp/unpacked" || exit 0
mkdir -p "$prefix/include" "$prefix/lib"
cp "$tmp/unpacked/$sub/include/nvjpeg.h" "$prefix/include/"
cp "$tmp/unpacked/$sub/lib/"libnvjpeg.so.* "$prefix/lib/"
echo "install_nvjpeg: done"
