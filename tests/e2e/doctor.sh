#!/usr/bin/env bash
# mirror-doctor end to end: the text report ends with one verdict line, --json parses and agrees
# with it, a machine without a usable GPU gets a CPU-fallback reason, CUDA_VISIBLE_DEVICES=""
# is named, bad flags fail, and under mpirun rank 0 reports every rank. The CPU's instruction set
# is printed, and ONEDNN_MAX_CPU_ISA caps oneDNN and Mirror's vector loops alike (Note [One ISA
# knob], src/cpu/cpu_isa.h). Usage: doctor.sh BUILD_DIR
set -euo pipefail
build="${1:?usage: doctor.sh BUILD_DIR}"
doctor="$build/bin/mirror-doctor"
[[ -x "$doctor" ]] || { echo "SKIP: $doctor not built"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$doctor" --help >"$work/help.txt"
grep -q -- "--json" "$work/help.txt" || fail "--help does not list --json"

"$doctor" >"$work/text.txt"
cat "$work/text.txt"
verdict="$(grep '^verdict: ' "$work/text.txt" || true)"
[[ -n "$verdict" ]] || fail "no 'verdict:' line"
[[ "$(grep -c '^verdict: ' "$work/text.txt")" == 1 ]] || fail "more than one verdict line"
[[ "$(tail -n 1 "$work/text.txt")" == "$verdict" ]] || fail "the verdict is not the last line"

"$doctor" --json >"$work/report.json"
python3 - "$work/report.json" "$verdict" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
text = report["verdict"]["text"]
assert "verdict: " + text == sys.argv[2], (text, sys.argv[2])
assert isinstance(report["verdict"]["gpu"], bool)
assert report["ranks"][0]["mpi_library"], "MPI library version missing"
gpu = report["ranks"][0]["gpu"]
if not report["verdict"]["gpu"]:
    assert text.startswith("will fall back to the CPU because "), text
    # The reason must be a real one, not a placeholder.
    reason = text[len("will fall back to the CPU because "):]
    assert len(reason) > 20, reason
    if not gpu["built_with_cuda"]:
        assert "built without CUDA" in reason, reason
    elif gpu["driver_version"] == 0:
        assert "no NVIDIA driver" in reason and "insufficient" in reason, reason
else:
    assert text.startswith("will train on "), text
print("json ok:", text)
PY

# This machine has no GPU: the verdict must be the CPU fallback with its reason. (On a GPU
# machine the verdict is checked by the JSON test above instead.)
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  grep -q '^verdict: will fall back to the CPU because ' "$work/text.txt" ||
    fail "no GPU here, but the verdict is: $verdict"
fi

# An empty CUDA_VISIBLE_DEVICES hides every GPU; a CUDA build says so. (A build without CUDA
# never gets that far and keeps its own reason.)
CUDA_VISIBLE_DEVICES="" "$doctor" >"$work/cvd.txt"
grep -q "CUDA_VISIBLE_DEVICES ...* ''" "$work/cvd.txt" || fail "empty CUDA_VISIBLE_DEVICES not shown"
grep -q '^verdict: will fall back to the CPU because ' "$work/cvd.txt" || fail "cvd verdict"

# The ISA in force: the CPU's own without a cap; capped, both oneDNN and Mirror's loops follow.
grep -q "^  CPU instruction set .* Mirror's vector loops: " "$work/text.txt" || fail "no CPU instruction set line"
ONEDNN_MAX_CPU_ISA=SSE41 "$doctor" >"$work/sse.txt"
grep -q "^  CPU instruction set .* SSE4.1 (ONEDNN_MAX_CPU_ISA=SSE41; the CPU has .*); Mirror's vector loops: baseline x86-64 (SSE2)$" "$work/sse.txt" ||
  fail "ONEDNN_MAX_CPU_ISA=SSE41 did not cap both: $(grep 'CPU instruction set' "$work/sse.txt")"
if grep -qw avx2 /proc/cpuinfo; then
  ONEDNN_MAX_CPU_ISA=AVX2 "$doctor" >"$work/avx2.txt"
  grep -q "^  CPU instruction set .* AVX2 (ONEDNN_MAX_CPU_ISA=AVX2; the CPU has .*); Mirror's vector loops: x86-64-v3 (AVX2)$" "$work/avx2.txt" ||
    fail "ONEDNN_MAX_CPU_ISA=AVX2 did not cap both: $(grep 'CPU instruction set' "$work/avx2.txt")"
  grep -q "bf16 no" "$work/avx2.txt" || fail "AVX2 still claims bfloat16: $(grep 'CPU mixed' "$work/avx2.txt")"
fi

if "$doctor" --no-such-flag >"$work/bad.txt" 2>&1; then fail "unknown flag accepted"; fi
grep -q "unrecognised option" "$work/bad.txt" || fail "unknown flag message: $(cat "$work/bad.txt")"
if "$doctor" --json yes >"$work/stray.txt" 2>&1; then fail "a stray argument was accepted"; fi
grep -q "unexpected argument 'yes'" "$work/stray.txt" || fail "stray argument message: $(cat "$work/stray.txt")"

# Under mpirun rank 0 prints one report covering both ranks.
if command -v mpirun >/dev/null 2>&1; then
  mpirun --oversubscribe -np 2 "$doctor" --json >"$work/mpi.json"
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert [x["world_rank"] for x in r["ranks"]] == [0, 1], r["ranks"]
assert sum(len(n["ranks"]) for n in r["nodes"]) == 2
assert r["ranks"][1]["local_size"] == 2
print("mpirun ok:", r["verdict"]["text"])' "$work/mpi.json"
fi
echo "PASS"
