#!/usr/bin/env bash
# Installs PyTorch for the CPU benchmarks (bench/step_torch.py) into a virtual environment
# without the ~3 GB of CUDA wheels that `pip install torch` pulls from PyPI: the torch wheel
# itself, its pure-Python dependencies, and the four shared libraries its CUDA part must find to
# load (cuFile, cuSPARSELt, NVSHMEM, NCCL). libcuda.so.1 comes from the CUDA toolkit's stub, so
# torch loads, reports no GPU and runs on the CPU. Prints the two lines to source before use.
#
#   scripts/install_torch_cpu.sh [VENV]     (default VENV: .venv-torch in the repo root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$root/.venv-torch}"
torch_version="${TORCH_VERSION:-2.15.0}"
cuda_stubs="${CUDA_HOME:-/usr/local/cuda}/lib64/stubs"

[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check)
"${pip[@]}" --no-deps "torch==$torch_version"
"${pip[@]}" filelock typing-extensions sympy networkx jinja2 fsspec numpy
# The exact versions torch names in its metadata, so its symbols resolve.
meta="$("$venv/bin/python" -c 'import importlib.metadata as m; print("\n".join(m.requires("torch") or []))')"
pins=()
for lib in nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 nvidia-nccl-cu13; do
  pin="$(grep -o "^$lib==[^;]*" <<<"$meta" || true)"
  [ -n "$pin" ] && pins+=("$pin")
done
"${pip[@]}" --no-deps "${pins[@]}" nvidia-cufile

[ -f "$cuda_stubs/libcuda.so" ] || {
  echo "install_torch_cpu: no $cuda_stubs/libcuda.so (set CUDA_HOME to the CUDA toolkit)" >&2
  exit 1
}
mkdir -p "$venv/stubs"
ln -sf "$cuda_stubs/libcuda.so" "$venv/stubs/libcuda.so.1"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
libs="$site/nvidia/nccl/lib:$site/nvidia/cu13/lib:$site/nvidia/cusparselt/lib"
libs+=":$site/nvidia/nvshmem/lib:${CUDA_HOME:-/usr/local/cuda}/lib64:$venv/stubs"
env_file="$venv/torch-env.sh"
echo "export LD_LIBRARY_PATH=$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" >"$env_file"
# shellcheck source=/dev/null
. "$env_file"
"$venv/bin/python" -W ignore -c 'import torch; print("torch", torch.__version__, "CPU threads", torch.get_num_threads())'
echo "to use: . $env_file && PYTHON=$venv/bin/python scripts/bench_step.sh"
