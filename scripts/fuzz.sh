#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into ${FUZZ_BUILD_DIR:-build-fuzz} and runs
# each for ${FUZZ_SECONDS:-120} seconds from a seed corpus of valid files. Findings (crash-*,
# leak-*, timeout-*) are written to the build dir's fuzz-out/<target>/ and make the script fail.
# usage: scripts/fuzz.sh [target...]
#        (default: idx_fuzz wordlist_fuzz arrays_fuzz csv_fuzz token_text_fuzz tar_fuzz)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-120}"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idx_fuzz wordlist_fuzz arrays_fuzz csv_fuzz token_text_fuzz tar_fuzz)

command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)"; exit 1; }
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMIRROR_FUZZ=ON -DMIRROR_CUDA=OFF -DMIRROR_BUILD_TESTS=OFF -DMIRROR_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}"

# Seed corpora: small valid inputs (the real Fashion-MNIST label file, word-list excerpts).
seeds="$build/fuzz-seeds"
mkdir -p "$seeds/idx_fuzz" "$seeds/wordlist_fuzz" "$seeds/arrays_fuzz" "$seeds/csv_fuzz" \
  "$seeds/token_text_fuzz" "$seeds/tar_fuzz"
fm=/usr/share/datasets/fashion-mnist
[ -f "$fm/t10k-labels-idx1-ubyte.gz" ] && cp "$fm/t10k-labels-idx1-ubyte.gz" "$seeds/idx_fuzz/labels.gz"
[ -f "$fm/t10k-labels-idx1-ubyte.gz" ] && gzip -dc "$fm/t10k-labels-idx1-ubyte.gz" | head -c 200 > "$seeds/idx_fuzz/labels_raw_cut"
printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02abcdefgh' > "$seeds/idx_fuzz/tiny3d"
for l in american-english french ngerman; do
  if [ -f "/usr/share/dict/$l" ]; then
    { printf '\x18'; shuf -n 40 --random-source=<(yes) "/usr/share/dict/$l"; } > "$seeds/wordlist_fuzz/$l"
  fi
done
{ printf '\x38'; printf 'cat\ndog\nchat\x00chat\nchien\n\xc3\xa9t\xc3\xa9\x00Katze\r\nHund\n'; } > "$seeds/wordlist_fuzz/three"

# .npy seeds: a mode byte (see arrays_fuzz.cpp), then a version 1.0 file with the given header
# dict and payload bytes.
npy_seed() {  # npy_seed MODE DICT PAYLOAD(printf format)
  local len=${#2}
  printf "\\x$(printf %02x "$1")\\x93NUMPY\\x01\\x00\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
  printf '%s' "$2"
  printf "$3"
}
a="$seeds/arrays_fuzz"
npy_seed 2 "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }" '\x00\x01\x02\xfe\xff\x07' > "$a/u1"
npy_seed 0 "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }" '\x00\x00\x80\x3f\x00\x00\x00\xc0' > "$a/f4"
npy_seed 4 "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }" \
  '\x01\0\0\0\0\0\0\0\x00\0\0\0\0\0\0\0\x03\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0' > "$a/i8"
npy_seed 0 "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 1), }" '\x02\0\0\0\x05\0\0\0\x01\0\0\0' > "$a/i4"
printf '\x00\x00\x00\x0d\x02\x00\x00\x00\x02\x00\x00\x00\x01\x3f\x80\x00\x00\xc0\x00\x00\x00' > "$a/idx_f32"
{ printf '\x01'; tail -c +2 "$a/u1" | gzip -c; } > "$a/u1_gz"
{ printf '\x02'; cat "$seeds/idx_fuzz/tiny3d"; } > "$a/idx_u8"
printf '\x03a,b,label\n1,2,0\n3.5,"4",1\n\n-1e3,+2,2\r\n' > "$seeds/csv_fuzz/header"
printf '\x0c1,0.5,7\n2,0.25,8\n' > "$seeds/csv_fuzz/float_first"
printf '\x00"x, y",z\n1,0\n' > "$seeds/csv_fuzz/quoted"
printf '\x001 5 3 9\n0 2 2\n\n3\t7 1 1\r\n' > "$seeds/token_text_fuzz/basic"
printf '\x532 4 5\n0 1\n1 6 6 6 6\n' > "$seeds/token_text_fuzz/stated"

# Tar seeds: Python's tarfile in its GNU (long names), pax and ustar (name prefix) formats.
python3 - "$seeds/tar_fuzz" <<'PY'
import io, sys, tarfile
for fmt, name in ((tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax"), (tarfile.USTAR_FORMAT, "ustar")):
    with tarfile.open(f"{sys.argv[1]}/{name}.tar", "w", format=fmt) as t:
        for key in ("a/0001", "b/" + "long" * 30 + "/0002"):
            for ext, data in ((".png", b"\x89PNG" + bytes(40)), (".cls", b"1")):
                info = tarfile.TarInfo(key + ext)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
PY

status=0
for t in "${targets[@]}"; do
  out="$build/fuzz-out/$t"
  corpus="$build/fuzz-corpus/$t"
  mkdir -p "$out" "$corpus"
  echo "fuzz: running $t for ${seconds}s"
  if ! "$build/bin/$t" "$corpus" "$seeds/$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -max_len="${FUZZ_MAX_LEN:-65536}" -timeout=10 -print_final_stats=1 -artifact_prefix="$out/" 2>"$out/log.txt"; then
    status=1
  fi
  grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)|ERROR|SUMMARY" "$out/log.txt" || true
  ls "$out" | grep -E "^(crash|leak|timeout|oom)-" && status=1 || echo "fuzz: $t: no findings"
done
exit $status
