#!/usr/bin/env bash
# Every code block of docs/*.md preceded by `<!-- example: PATH -->` is the file PATH of the
# repository, byte for byte, so the example a page prints is the one the tests compile and run
# (docs/cpp-api.md's program: tests/e2e/install_external.sh builds the page's blocks).
# Usage: docs_examples.sh <build dir> (unused: it reads the source tree only).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
python3 "$root/scripts/doc_examples.py" check "$root"
