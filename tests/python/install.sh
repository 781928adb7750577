#!/usr/bin/env bash
# python.install: `pip install .` of the source tree into a fresh venv (BUILD_DIR/python-venv),
# the setup of every other python.* test. Checks that the module imports, that its version is
# the C++ project's, and that `pip wheel .` makes a wheel holding the package, the extension
# and libmirror. Then tries Keras with its lightest backend (jax, CPU) for the Keras tests,
# which report Skipped without it. Exit 77 (Skipped) when PyPI cannot be reached.
# Usage: install.sh BUILD_DIR PROJECT_VERSION
set -uo pipefail
build="$(cd "${1:?usage: install.sh BUILD_DIR PROJECT_VERSION}" && pwd)"
version="${2:?usage: install.sh BUILD_DIR PROJECT_VERSION}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$build/python-venv"
fail() { echo "FAIL: $*"; exit 1; }

rm -rf "$venv"
python3 -m venv "$venv" || { echo "skip: python3 -m venv failed (install python3-venv)"; exit 77; }
pip=("$venv/bin/pip" --disable-pip-version-check)
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
if ! timeout 120 "${pip[@]}" download -q --no-deps -d "$probe" nanobind >/dev/null 2>&1; then
  echo "skip: PyPI cannot be reached (the build needs scikit-build-core and nanobind from it)"
  exit 77
fi

# The compilers CMake picks for scripts/build.sh (scikit-build-core would take Python's own,
# `g++`, and ccache would not reuse the C++ build's objects: Note [Python build folder]).
export CC="${CC:-cc}" CXX="${CXX:-c++}"
start=$(date +%s)
"${pip[@]}" install "$root[test]" || fail "pip install $root failed"
echo "pip install: $(($(date +%s) - start)) s"
got="$("$venv/bin/python" -c 'import mirror; print(mirror.__version__)')" ||
  fail "import mirror failed in $venv"
[ "$got" = "$version" ] || fail "mirror.__version__ is $got, the C++ project is $version"
installed="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("mirror"))')"
[ "$installed" = "$version" ] || fail "the installed distribution is $installed, not $version"

# pip wheel: the same build folder, so only the wheel is packed again.
"${pip[@]}" wheel -q --no-deps -w "$probe/wheel" "$root" || fail "pip wheel $root failed"
wheel="$(ls "$probe"/wheel/mirror-"$version"-*.whl)" || fail "no mirror-$version wheel made"
listing="$("$venv/bin/python" -m zipfile -l "$wheel")"
for want in 'mirror/__init__.py' 'mirror/_mirror\.' 'mirror/libmirror\.so\.' 'mirrorrun'; do
  grep -q "$want" <<<"$listing" || fail "the wheel lacks $want:
$listing"
done
echo "python.install: mirror $got installed in $venv; $(basename "$wheel") holds the package"

# Best effort: Keras 3 and jax's CPU wheels for tests/python/test_keras.py.
if timeout 900 "${pip[@]}" install -q keras jax >/dev/null 2>&1 &&
  KERAS_BACKEND=jax "$venv/bin/python" -c 'import keras' 2>/dev/null; then
  echo "keras $(KERAS_BACKEND=jax "$venv/bin/python" -c 'import keras; print(keras.__version__)') (jax backend) installed"
else
  echo "keras or jax could not be installed: the Keras tests will be skipped"
fi
exit 0
