#!/usr/bin/env bash
# What Zenith adds to a call (bench_call_overhead), on BERT-base (sequence 128) and ResNet-50
# (224x224) at batch 1 with random weights, traced with torch.jit.trace as a user would, on CUDA
# and on the CPU; and on synthetic modules with as many parameter and buffer tensors as those two
# (201 and 320) whose forward is one addition, where the excess is Zenith's host work alone.
# Needs python3 with torch, torchvision and transformers (the GPU machine's).
#   bench/call_overhead.sh BUILD_DIR   (after building bench_call_overhead and the plugins there)
#   bench/call_overhead.sh BUILD_DIR --graphed
#       issue 16's host-time check instead: on CUDA only, the host time of a graphed call
#       (--host-only) of BERT-base b1 in float32 and float16 and ResNet-50 b1 in float32, two rounds.
set -uo pipefail
build="${1:?usage: bench/call_overhead.sh BUILD_DIR [--graphed]}"
graphed="${2:-}"
models="$(mktemp -d)"
devices="cpu"
python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' && devices="cuda cpu"
HF_HUB_OFFLINE=1 MODELS="$models" DEVICES="$devices" python3 - <<'PY' >&2
import os, torch, torchvision, transformers
torch.manual_seed(0)
for device in os.environ["DEVICES"].split():
    config = transformers.BertConfig(); config.torchscript = True; config._attn_implementation = "eager"
    bert = transformers.BertModel(config).eval().to(device)
    ids = torch.randint(0, 30522, (1, 128), device=device)
    mask = torch.ones(1, 128, dtype=torch.long, device=device)
    resnet = torchvision.models.resnet50().eval().to(device)
    with torch.no_grad():
        torch.jit.trace(bert, example_kwarg_inputs={"input_ids": ids, "attention_mask": mask}, strict=False,
                        check_trace=False).save(f"{os.environ['MODELS']}/bert-{device}.pt")
        torch.jit.trace(resnet, torch.randn(1, 3, 224, 224, device=device),
                        check_trace=False).save(f"{os.environ['MODELS']}/resnet50-{device}.pt")
PY
if [ "$graphed" = "--graphed" ]; then
  [ "$devices" = cpu ] && { echo "--graphed needs CUDA" >&2; exit 1; }
  for round in 1 2; do
    for dtype in float32 float16; do
      "$build/bin/bench_call_overhead" "$models/bert-cuda.pt" --tokens 1,128,30522 --device cuda --dtype $dtype \
        --calls 100 --reps 11 --host-only --label "BERT-base b1 $dtype, round $round" | tail -1
    done
    "$build/bin/bench_call_overhead" "$models/resnet50-cuda.pt" --image 1,3,224,224 --device cuda \
      --calls 100 --reps 11 --host-only --label "ResNet-50 b1 float32, round $round" | tail -1
  done
  rm -rf "$models"
  exit 0
fi
echo "| model | device | dtype | direct us/call | plan hit us/call | eager signature us/call | host us until a call returns: direct / plan hit / eager signature |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for device in $devices; do
  reps="--calls 50 --reps 15"; [ "$device" = cpu ] && reps="--calls 5 --reps 9"
  "$build/bin/bench_call_overhead" "$models/bert-$device.pt" --tokens 1,128,30522 --device "$device" $reps \
    --label "BERT-base, 128 tokens" | tail -1
  "$build/bin/bench_call_overhead" "$models/resnet50-$device.pt" --image 1,3,224,224 --device "$device" $reps \
    --label "ResNet-50, 224x224" | tail -1
  for tensors in 201 320; do
    "$build/bin/bench_call_overhead" --synthetic $tensors --device "$device" --calls 1000 --reps 15 | tail -1
  done
done
rm -rf "$models"
