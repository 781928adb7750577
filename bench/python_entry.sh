#!/usr/bin/env bash
# The cost of the Python entry: the same training run (an MLP on 8-feature NumPy data, same
# settings and ranks) started as `mirrorrun -np N mirror-train --model-spec ... --train-x ...`
# and as `mirrorrun -np N python3 script.py` calling mirror.fit on the arrays, alternately
# ROUNDS times; prints each run's wall time (whole job: launcher, interpreter and imports
# included) and the medians, and checks that both trained the same weights.
# Usage: bench/python_entry.sh [PYTHON] (a python with `mirror` installed; default python3)
#   env: BUILD_DIR (build), NP (2), ROUNDS (5), EPOCHS (5), SAMPLES (20000), THREADS (1 per rank)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${1:-python3}"
build="${BUILD_DIR:-$root/build}"
np_="${NP:-2}" rounds="${ROUNDS:-5}" epochs="${EPOCHS:-5}" samples="${SAMPLES:-20000}"
threads="${THREADS:-1}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$py" - "$work" "$samples" <<'PY'
import json, sys
import numpy as np
d, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
y = rng.integers(0, 3, n)
x = rng.normal(0, 0.7, (n, 8)).astype(np.float32) + 2 * np.eye(3, 8, dtype=np.float32)[y]
np.save(f"{d}/x.npy", x)
np.save(f"{d}/y.npy", y)
json.dump({"name": "mlp", "layers": [{"type": "dense", "units": 64, "activation": "relu"},
                                     {"type": "dense"}]}, open(f"{d}/mlp.json", "w"))
PY
cat >"$work/train.py" <<PY
import json, sys
import numpy as np
import mirror
d = sys.argv[1]
x, y = np.load(f"{d}/x.npy"), np.load(f"{d}/y.npy")
h = mirror.fit(json.load(open(f"{d}/mlp.json")), x, y, epochs=$epochs, batch_size=64, lr=0.01,
               devices="cpu", no_progress=True, threads=$threads)
if mirror.rank() == 0:
    print("weights fingerprint:", h.summary["weights_fingerprint"])
PY

timed() {  # prints "seconds fingerprint"
  local start end out
  start=$(date +%s.%N)
  out="$("$@" 2>/dev/null)"
  end=$(date +%s.%N)
  echo "$(echo "$end - $start" | bc) $(grep -o 'weights fingerprint: [0-9a-f]*' <<<"$out" | tail -1 | awk '{print $3}')"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
cli=() python=()
for ((r = 1; r <= rounds; r++)); do
  read -r t_cli f_cli < <(timed "$root/launch/mirrorrun" -np "$np_" "$build/bin/mirror-train" \
    --model-spec "$work/mlp.json" --train-x "$work/x.npy" --train-y "$work/y.npy" \
    --epochs "$epochs" --batch-size 64 --lr 0.01 --devices cpu --no-progress --threads "$threads")
  read -r t_py f_py < <(timed "$root/launch/mirrorrun" -np "$np_" "$py" "$work/train.py" "$work")
  [ "$f_cli" = "$f_py" ] || { echo "FAIL: fingerprints differ: mirror-train $f_cli, python $f_py"; exit 1; }
  echo "round $r: mirror-train ${t_cli} s, python ${t_py} s (fingerprint $f_cli)"
  cli+=("$t_cli") python+=("$t_py")
done
m_cli="$(printf '%s\n' "${cli[@]}" | median)" m_py="$(printf '%s\n' "${python[@]}" | median)"
echo "median of $rounds: mirror-train ${m_cli} s, python ${m_py} s, difference $(echo "$m_py - $m_cli" | bc) s (-np $np_, $epochs epochs of $samples samples)"
