#!/usr/bin/env bash
# Installs what Mirror needs on a fresh Debian 12 machine. Idempotent: when everything is
# present it only checks (a second run takes about a second).
#   scripts/setup.sh [--cpu-only]
# --cpu-only: leave out nvJPEG (only a CUDA build uses it; scripts/demo.sh passes it where no
# NVIDIA driver is present). apt's and pip's output goes to a log file
# (${MIRROR_SETUP_LOG:-/tmp/mirror-setup.log}); the terminal gets one line per stage, and the
# log's last lines when something fails.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
cpu_only=0
for arg in "$@"; do
  case "$arg" in
    --cpu-only) cpu_only=1 ;;
    *) echo "setup: unknown argument '$arg' (expected --cpu-only)" >&2; exit 2 ;;
  esac
done
log="${MIRROR_SETUP_LOG:-/tmp/mirror-setup.log}"

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  iproute2 util-linux
  libopenmpi-dev openmpi-bin
  libdnnl-dev
  libboost-program-options-dev zlib1g-dev nlohmann-json3-dev
  libturbojpeg0-dev libjpeg-dev libpng-dev
  libprotobuf-dev protobuf-compiler
  libhdf5-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  wamerican wngerman wfrench wspanish witalian
)
optional=(gnuplot-nox clang libclang-rt-14-dev python3-venv)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${packages[@]}" "${optional[@]}"; do installed "$p" || missing+=("$p"); done
# nvJPEG for --decode gpu, when the CUDA toolkit lacks it (optional: only warns).
# Its warnings (stderr) stay on the terminal.
if ((!cpu_only)); then "$here/install_nvjpeg.sh" >>"$log" || true; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi

start=$SECONDS
echo "setup: installing ${#missing[@]} Debian packages (apt's output: $log)"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
run_logged() {  # run_logged WHAT COMMAND...: the command's output to the log; its tail on failure
  if ! "$@" >>"$log" 2>&1; then
    echo "setup: $1 failed; the last lines of $log:" >&2
    tail -n 20 "$log" >&2
    return 1
  fi
}
{ echo "== $(date -u +%FT%TZ) setup: ${missing[*]}"; } >>"$log"
run_logged $SUDO apt-get update -qq
# Required packages must install; optional ones may be unavailable on some mirrors.
required_missing=()
for p in "${missing[@]}"; do
  [[ " ${optional[*]} " == *" $p "* ]] || required_missing+=("$p")
done
if [ ${#required_missing[@]} -gt 0 ]; then
  run_logged $SUDO apt-get install -y -qq --no-install-recommends "${required_missing[@]}"
fi
for p in "${optional[@]}"; do
  installed "$p" || $SUDO apt-get install -y -qq --no-install-recommends "$p" >>"$log" 2>&1 ||
    echo "setup: optional $p not installed (see $log)"
done
echo "setup: done in $((SECONDS - start)) s"
