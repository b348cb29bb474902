"""Where a peer's inference call spends its device time, in the form bench_inference_profile
prints Zenith's: one fixed-shape case of the suite (BERT, ResNet-50, the elementwise chain) run by
torch.compile in a mode, 10 calls to warm up, then 20 under the profiler; per call: wall time,
device busy time, kernel launches, and the kernels that took longest. Issue 17 asks for a peer's
profile beside Zenith's where Zenith is behind.

  peer_profile.py --dir D --case resnet_b64_f32 [--mode default|reduce-overhead]

D is a data folder made by `scripts/bench --prepare` (weights and inputs). AOTInductor's packages
are not profiled: loading one in Python (torch._inductor.aoti_load_package) crashed with a
segmentation fault in _load_aoti on the GPU machine (2026-11-27), where the C++ runner loads the
same packages. torch.compile's default mode runs the Inductor kernels such a package holds.
Prints Markdown. Needs a CUDA device.
"""
import argparse
import os
import sys
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_models  # noqa: E402
from cases import load_cases  # noqa: E402

WARMUP, PROFILED, TOP = 10, 20, 12


def callable_of(folder, case, mode, device):
    """The peer's forward over the case's inputs, as a function of no arguments."""
    if case["workload"] not in ("bert", "resnet", "elementwise"):
        raise SystemExit(f"peer_profile.py: {case['name']} is a {case['workload']} case; only fixed-shape "
                         "inference cases (bert, resnet, elementwise) are profiled")
    inputs, _ = case_models.load_io(folder, case, device)
    args = case_models.fixed_inputs(case, inputs)
    model = case_models.load_model(folder, case, device)
    compiled = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)
    return lambda: compiled(*args)


def short(name, width=110):
    return name if len(name) <= width else name[:width - 3] + "..."


def profiled(call):
    """(wall ms, device ms, launches, {kernel: [launches, ms]}) per call."""
    with torch.inference_mode():
        for _ in range(WARMUP):
            call()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(PROFILED):
                call()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) * 1000 / PROFILED
    kernels = defaultdict(lambda: [0, 0.0])
    device_ms = 0.0
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = event.device_time / 1000
        device_ms += ms
        if "memcpy" not in event.name.lower() and "memset" not in event.name.lower():
            kernels[event.name][0] += 1
            kernels[event.name][1] += ms
    launches = sum(n for n, _ in kernels.values())
    return wall, device_ms / PROFILED, launches / PROFILED, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--mode", default="default", choices=["default", "reduce-overhead"])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("peer_profile.py: needs a CUDA device")
    cases = [c for c in load_cases(False, {args.case}) if c["name"] == args.case]
    if not cases:
        raise SystemExit(f"peer_profile.py: no case {args.case} in cases.json")
    case, device = cases[0], torch.device("cuda")
    wall, device_ms, launches, kernels = profiled(callable_of(args.dir, case, args.mode, device))
    print(f"### {case['name']}, {args.mode}\n")
    print(f"per step: wall {wall:.2f} ms, device busy {device_ms:.2f} ms ({100 * device_ms / wall:.0f}%), "
          f"{launches:.0f} kernels\n")
    print("| kernel | launches | device ms |\n| --- | --- | --- |")
    for name, (count, ms) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:TOP]:
        print(f"| `{short(name)}` | {count / PROFILED:g} | {ms / PROFILED:.3f} |")


if __name__ == "__main__":
    main()
