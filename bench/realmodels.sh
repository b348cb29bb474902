#!/usr/bin/env bash
# Eager against Zenith, per model of the real-model suite (tests/realmodels): each model exported
# by tests/realmodels/export_models.py, then timed by bench_call_overhead at batch 1 and at a larger
# batch (the "direct" column is the module's own forward, "plan hit" Zenith's compiled call).
#   bench/realmodels.sh BUILD_DIR [cuda|cpu] [float32|float16] [LARGE_BATCH] [EXPORTER ARGS...]
# EXPORTER ARGS go to export_models.py: `--full-size` times BERT-base and ResNet-50 at full size,
# `--only NAME,...` some models.
# Needs a python with torch, torchvision and transformers (the GPU machine's python3, or .venv).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: bench/realmodels.sh BUILD_DIR [cuda|cpu] [float32|float16] [LARGE_BATCH] [EXPORTER ARGS...]}"
device="${2:-cuda}"
dtype="${3:-float32}"
large="${4:-16}"
shift $(( $# < 4 ? $# : 4 ))
python=python3
[ -x "$root/.venv/bin/python" ] && python="$root/.venv/bin/python"
models="$(mktemp -d)"
trap 'rm -rf "$models"' EXIT
"$python" "$root/tests/realmodels/export_models.py" "$models" --device "$device" --dtype "$dtype" "$@" >&2 || exit 1
# One line per model: its name, then bench_call_overhead's input flag for batch B (a placeholder).
"$python" - "$models/manifest.json" > "$models/inputs.txt" <<'PY' || exit 1
import json, sys
for model in json.load(open(sys.argv[1]))["models"]:
    first = model["inputs"][0]
    if first["kind"] == "ids":
        flag = f"--tokens B,{first['shape'][1]},{first['high']}"
    else:
        flag = "--image B," + ",".join(str(n) for n in first["shape"][1:])
    fuser = "on" if model.get("torchscript_fuser", True) else "off"
    print(model["name"], fuser, flag)
PY
echo "| model | device | dtype | eager us/call | Zenith plan hit us/call | eager signature us/call |"
echo "| --- | --- | --- | --- | --- | --- |"
reps="--calls 20 --reps 5"; [ "$device" = cpu ] && reps="--calls 3 --reps 3"
status=0
# A model's bench stops after this long and the table says so: on CUDA TorchScript's own executor
# may spend minutes fusing a large module for each new shape (the "eager" column's warm-up); the
# models the exporter knows to do so run with its fuser off ("torchscript_fuser" in the manifest).
seconds="${ZENITH_BENCH_MODEL_SECONDS:-120}"
while read -r name fuser flag spec; do
  for batch in 1 "$large"; do
    timeout "$seconds" "$build/bin/bench_call_overhead" "$models/$name.pt" "$flag" "${spec/B,/$batch,}" \
        --device "$device" --dtype "$dtype" $reps --label "$name b$batch" --torchscript-fuser "$fuser" \
        2> "$models/err.txt" > "$models/row.txt"
    code=$?
    if [ $code -eq 0 ]; then
      tail -1 "$models/row.txt"
    else
      status=1
      why="$(tail -1 "$models/err.txt")"; [ $code -eq 124 ] && why="stopped after $seconds s"
      echo "| $name b$batch | $device | $dtype | failed: $why | | |"
    fi
  done
done < "$models/inputs.txt"
exit $status
