#!/usr/bin/env bash
# The layout is the architecture (docs/architecture.md): a call flows from runtime/ through capture/
# and passes/ to the plugins, and each folder builds only on the folders below it:
#   core/ < passes/ < capture/ < runtime/      backends/ and plugins/ on core/ (and backends/dispatcher/)
# Every project include ("folder/...") of every source and header is checked against that order;
# prints each include that reaches up or sideways, and exits 1 if there is one.
#   check_layering.sh [repository root]
set -euo pipefail
root="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"

# The folders each folder may include, besides its own and the public headers (zenith/).
allowed() {
  case "$1" in
    core) echo "" ;;
    passes) echo "core" ;;
    capture) echo "core passes" ;;
    runtime) echo "core passes capture" ;;
    backends) echo "core backends" ;;
    plugins) echo "core backends" ;;
    include) echo "" ;;
  esac
}

violations=0
checked=0
for folder in core passes capture runtime backends plugins include; do
  [ -d "$root/$folder" ] || { echo "layering: no folder $folder/ under $root" >&2; exit 2; }
  while IFS= read -r file; do
    while IFS= read -r line; do
      target="${line#*\"}"
      target="${target%%/*}"
      checked=$((checked + 1))
      ok=0
      for permitted in "$folder" zenith $(allowed "$folder"); do
        [ "$target" = "$permitted" ] && ok=1
      done
      # The public headers include only each other.
      [ "$folder" = include ] && [ "$target" != zenith ] && ok=0
      if [ $ok -eq 0 ]; then
        echo "layering: ${file#"$root"/} includes \"${line#*\"}: $folder/ may include $(allowed "$folder" | sed 's/^$/nothing/') besides itself and zenith/"
        violations=$((violations + 1))
      fi
    done < <(grep -hoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/[^"]+"' "$file" || true)
  done < <(find "$root/$folder" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' \))
done
if [ $checked -eq 0 ]; then
  echo "layering: found no project includes under $root" >&2
  exit 2
fi
echo "layering: $checked project includes checked, $violations against the order"
[ $violations -eq 0 ]
