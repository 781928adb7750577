#!/usr/bin/env bash
# Mirror as an installed library: `cmake --install` into a temporary prefix, then, against that
# prefix only: the README, docs/ and the example are in share/doc/Mirror, every public header
# compiles alone, the installed programs find libmirror.so, the example program that
# docs/cpp-api.md prints (= examples/external_project; find_package(Mirror)), extracted from the
# installed page, builds and trains (train::Trainer) under 2 MPI
# ranks with a falling loss, the same weights on both ranks, checkpoints and a JSON-lines log; a
# consumer links Mirror::mirror_static, and one builds with `pkg-config --cflags --libs mirror`.
# Usage: install_external.sh BUILD_DIR
set -euo pipefail
build="$(cd "${1:?usage: install_external.sh BUILD_DIR}" && pwd)"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
for program in mirror-train mirror-bench mirror-doctor; do
  [[ -x "$build/bin/$program" ]] || { echo "SKIP: $build/bin/$program not built"; exit 77; }
done
command -v pkg-config >/dev/null || { echo "SKIP: pkg-config is not installed"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset LD_LIBRARY_PATH
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== [${SECONDS}s] $*"; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cxx="$(cache CMAKE_CXX_COMPILER)"
generator="$(cache CMAKE_GENERATOR)"
prefix="$work/prefix"
libdir="$prefix/$(cache CMAKE_INSTALL_LIBDIR)"

step "install"
cmake --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install"; }
for f in bin/mirror-train bin/mirror-bench bin/mirror-doctor bin/mirrorrun include/mirror/tensor.h; do
  [[ -e "$prefix/$f" ]] || fail "$f is not installed"
done
for f in libmirror.a libmirror.so pkgconfig/mirror.pc cmake/Mirror/MirrorConfig.cmake \
         cmake/Mirror/MirrorConfigVersion.cmake cmake/Mirror/MirrorTargets.cmake; do
  [[ -e "$libdir/$f" ]] || fail "$libdir/$f is not installed"
done
docdir="$prefix/share/doc/Mirror"
[[ -f "$docdir/mirrorrun.md" ]] || fail "launch/README.md is not installed as $docdir/mirrorrun.md"
[[ -f "$docdir/README.md" ]] || fail "README.md is not installed in $docdir"
for doc in "$source_dir"/docs/*.md; do
  cmp -s "$doc" "$docdir/docs/$(basename "$doc")" || fail "docs/$(basename "$doc") is not installed in $docdir/docs"
done
for f in CMakeLists.txt main.cpp; do
  [[ -f "$docdir/examples/external_project/$f" ]] || fail "examples/external_project/$f is not installed"
done
soname="$(readelf -d "$libdir/libmirror.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')"
[[ "$soname" =~ ^libmirror\.so\.[0-9]+\.[0-9]+$ ]] || fail "SONAME is '$soname'"
[[ -e "$libdir/$soname" ]] || fail "$soname is not installed"

step "installed programs find the installed libmirror.so"
resolved="$(ldd "$prefix/bin/mirror-train" | sed -n 's/.*libmirror\.so[^ ]* => \([^ ]*\).*/\1/p')"
[[ -n "$resolved" && "$(realpath "$resolved")" == "$(realpath "$libdir/$soname")"* ]] ||
  { ldd "$prefix/bin/mirror-train"; fail "mirror-train does not load libmirror.so from $libdir"; }
"$prefix/bin/mirror-doctor" --help >/dev/null || fail "installed mirror-doctor does not run"
"$prefix/bin/mirror-train" --help >/dev/null || fail "installed mirror-train does not run"
for program in mirror-predict mirror-export; do
  "$prefix/bin/$program" --help >/dev/null || fail "installed $program does not run"
done

step "every public header compiles alone"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
read -r -a cflags <<<"$(pkg-config --cflags mirror)" || fail "pkg-config --cflags mirror"
mkdir "$work/headers"
(cd "$prefix/include" && find mirror -name '*.h' | sort) >"$work/headers.txt"
[[ "$(wc -l <"$work/headers.txt")" -ge 30 ]] || fail "only $(wc -l <"$work/headers.txt") headers installed"
while read -r header; do
  printf '#include <%s>\n' "$header" >"$work/headers/$(echo "$header" | tr / _).cpp"
done <"$work/headers.txt"
# Public headers reach nothing but other public headers and system/dependency headers.
if grep -rn '#include "' "$prefix/include/mirror" | grep -v '#include "mirror/'; then
  fail "a public header includes a non-public file"
fi
export cxx
printf '%s\n' "${cflags[@]}" >"$work/cflags.txt"
find "$work/headers" -name '*.cpp' -print0 | sort -z |
  xargs -0 -P 2 -I{} sh -c '"$cxx" -std=c++20 -fsyntax-only $(cat "$0") "$1" 2>"$1.err" ||
                          { echo "header alone fails: $1"; cat "$1.err"; exit 255; }' \
    "$work/cflags.txt" {} || fail "a public header does not compile alone"
echo "$(wc -l <"$work/headers.txt") headers compile alone"

step "docs/cpp-api.md's example (examples/external_project): find_package(Mirror), CMAKE_PREFIX_PATH only"
# The page's code blocks, as printed there (tests/e2e/docs_examples.sh: they are the files).
python3 "$source_dir/scripts/doc_examples.py" extract "$docdir/docs/cpp-api.md" "$work/example" ||
  fail "docs/cpp-api.md holds no example"
cmake -S "$work/example" -B "$work/external" -G "$generator" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure external_project"; }
grep -q "^Mirror_DIR:PATH=$libdir/cmake/Mirror$" "$work/external/CMakeCache.txt" ||
  fail "external_project did not find Mirror in $prefix"
cmake --build "$work/external" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build external_project"; }
mpirun --oversubscribe --bind-to none -np 2 "$work/external/spirals" 6 "$work/run" >"$work/run.out" 2>&1 ||
  { cat "$work/run.out"; fail "external_project run"; }
cat "$work/run.out"
ls "$work/run/checkpoints"/* >/dev/null || fail "external_project wrote no checkpoint"
grep -q '"type": *"epoch"' "$work/run/log.jsonl" || fail "external_project wrote no JSON-lines log"
python3 - "$work/run.out" <<'PY' || fail "external_project: see above"
import re, sys
text = open(sys.argv[1]).read()
losses = [float(x) for x in re.findall(r"^epoch \d+/\d+: loss ([0-9.]+)", text, re.M)]
assert len(losses) >= 2, f"expected per-epoch losses, found {losses}"
assert losses[-1] < 0.8 * losses[0], f"the loss did not fall: {losses}"
prints = re.findall(r"^rank (\d+) weights fingerprint ([0-9a-f]+)", text, re.M)
assert sorted(r for r, _ in prints) == ["0", "1"], f"expected ranks 0 and 1, found {prints}"
assert len({f for _, f in prints}) == 1, f"the ranks' weights differ: {prints}"
assert '[mirror] model "spirals MLP 2-64-64-3" (a C++ Task): ' in text, "the Task's description"
PY

step "a consumer of Mirror::mirror_static"
mkdir "$work/static"
cat >"$work/static/main.cpp" <<'CPP'
#include <mirror/nn/layers.h>
#include <mirror/nn/sequential.h>
int main() {
  mirror::nn::Sequential m;
  m.emplace<mirror::nn::Dense>(3);
  m.build({4}, 1);
  return m.parameter_count() == 15 ? 0 : 1;
}
CPP
cat >"$work/static/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(static_consumer LANGUAGES CXX)
find_package(Mirror 0.2 REQUIRED)
add_executable(consumer main.cpp)
target_link_libraries(consumer PRIVATE Mirror::mirror_static)
CMAKE
cmake -S "$work/static" -B "$work/static/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/static.log" 2>&1 &&
  cmake --build "$work/static/build" >>"$work/static.log" 2>&1 ||
  { cat "$work/static.log"; fail "Mirror::mirror_static consumer"; }
"$work/static/build/consumer" || fail "Mirror::mirror_static consumer run"
ldd "$work/static/build/consumer" | grep -q libmirror && fail "the static consumer loads libmirror.so"

step "pkg-config consumer"
cp "$work/static/main.cpp" "$work/pc_consumer.cpp"
read -r -a libs <<<"$(pkg-config --libs mirror)"
"$cxx" -std=c++20 "$work/pc_consumer.cpp" -o "$work/pc_consumer" "${cflags[@]}" "${libs[@]}" \
  -Wl,-rpath,"$libdir" || fail "pkg-config consumer does not build"
"$work/pc_consumer" || fail "pkg-config consumer run"
echo "OK"
