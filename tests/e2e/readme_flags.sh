#!/usr/bin/env bash
# Every flag that `mirror-train --help` lists is in the README's flag table (or its text), so
# the README cannot fall behind the program. Usage: readme_flags.sh <build dir>.
set -u
build="$(cd "${1:?usage: readme_flags.sh <build dir>}" && pwd)"
readme="$(dirname "${BASH_SOURCE[0]}")/../../README.md"
train="$build/bin/mirror-train"
if [ ! -x "$train" ]; then echo "skip: $train is not built"; exit 77; fi
flags=$("$train" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u)
[ "$(echo "$flags" | wc -l)" -ge 40 ] || { echo "FAIL: --help lists only: $flags"; exit 1; }
missing=0
for f in $flags; do
  [ "$f" = --help ] && continue
  # A flag stands in the README as `--flag ...` or inside a pair like `--train-x/--train-y`.
  grep -qE -- "(\`|/)$f([^a-z0-9-]|\$)" "$readme" || { echo "missing from README.md: $f"; missing=$((missing + 1)); }
done
[ "$missing" -eq 0 ] || { echo "FAIL: $missing flag(s) of mirror-train --help are not in README.md"; exit 1; }
echo "readme_flags: all $(echo "$flags" | wc -l) flags of mirror-train --help are in README.md"
