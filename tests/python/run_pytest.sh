#!/usr/bin/env bash
# Runs one pytest file of tests/python in the venv that tests/python/install.sh made, or
# reports Skipped (exit 77) with the reason when that venv has no `mirror` (PyPI unreachable).
# pytest's all-skipped run is reported as Skipped too (conftest hook: exit 77).
# Usage: run_pytest.sh BUILD_DIR TEST_FILE
set -u
build="$(cd "${1:?usage: run_pytest.sh BUILD_DIR TEST_FILE}" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="$build/python-venv/bin/python"
if ! "$py" -c 'import mirror, pytest' 2>/dev/null; then
  echo "skip: $build/python-venv has no mirror module (python.install did not install it)"
  exit 77
fi
export MIRROR_BUILD_DIR="$build"
cd "$here" && exec "$py" -m pytest -q -rs -p no:cacheprovider "$here/$2"
