#!/usr/bin/env bash
# Installs what Mirror needs on a fresh Debian 12 machine. Idempotent: when everything is
# present it only checks (a second run takes about a second).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  iproute2 util-linux
  libopenmpi-dev openmpi-bin
  libdnnl-dev
  libboost-program-options-dev zlib1g-dev nlohmann-json3-dev
  libturbojpeg0-dev libpng-dev
  libprotobuf-dev protobuf-compiler
  libhdf5-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  wamerican wngerman wfrench wspanish witalian
)
optional=(gnuplot-nox clang libclang-rt-14-dev python3-venv)

missing=()
for p in "${packages[@]}" "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# nvJPEG for --decode gpu, when the CUDA toolkit lacks it (optional: only warns).
"$(dirname "${BASH_SOURCE[0]}")/install_nvjpeg.sh"
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Required packages must install; optional ones may be unavailable on some mirrors.
required_missing=()
for p in "${missing[@]}"; do
  [[ " ${optional[*]} " == *" $p "* ]] || required_missing+=("$p")
done
if [ ${#required_missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${required_missing[@]}"
fi
for p in "${optional[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    $SUDO apt-get install -y -qq --no-install-recommends "$p" || echo "setup: optional $p not installed"
done
echo "setup: done"
