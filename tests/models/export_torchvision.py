#!/usr/bin/env python3
"""Exports torchvision's image classifiers as TorchScript for test_torchvision_cuda.

Each classifier is built with random weights (nothing is downloaded), put in eval mode on CUDA in
float32 and in float16, traced with torch.jit.trace as a user would, and saved as NAME-DTYPE.pt.
manifest.json lists what was written (name, dtype, input sizes) and what was not, with the reason.

    export_torchvision.py --out DIR [--set families|all] [--only NAME,NAME] [--workers N]

--set families (the default, what the test suite runs) takes the three models that returned stale
values before (efficientnet_b0, mobilenet_v3_small, regnet_y_400mf) and one or two members of every
other family; --set all takes every classifier torchvision lists (minutes more on the GPU machine).
"""
import argparse
import json
import multiprocessing
import os
import sys
import time

# Larger than 300M parameters: minutes to trace and compile each, and nothing the smaller members
# of their families (vit_b_16, regnet_y_16gf) do not exercise.
TOO_LARGE = {"vit_h_14", "vit_l_16", "vit_l_32", "regnet_y_128gf"}
FAMILIES = [
    "efficientnet_b0", "mobilenet_v3_small", "regnet_y_400mf", "alexnet", "convnext_tiny", "efficientnet_v2_s",
    "googlenet", "inception_v3", "maxvit_t", "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_large", "regnet_x_400mf",
    "resnet50", "resnext50_32x4d", "shufflenet_v2_x1_0", "squeezenet1_1", "swin_t", "vgg11_bn", "vit_b_16",
    "wide_resnet50_2",
]
# Input sizes where 224x224 is not what the model expects.
INPUT_SIZE = {"inception_v3": 299}


def export(job):
    name, dtype_name, out = job
    import torch
    import torchvision

    torch.manual_seed(0)
    # The trace records cuDNN's TF32 flag in every convolution (allow_tf32, true by Python's
    # default), where the test's global flags no longer reach it: traced so, float32 convolutions
    # would run in TF32 on both sides, and eager's NCHW kernels and a channels-last plan's NHWC
    # ones round differently (ConvNeXt-Tiny's logits by 1.7e-3 of the largest on an H100).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = {"float32": torch.float32, "float16": torch.float16}[dtype_name]
    started = time.time()
    try:
        kwargs = {"weights": None}
        if name in ("googlenet", "inception_v3"):
            kwargs["aux_logits"] = False
            kwargs["init_weights"] = True
        model = torchvision.models.get_model(name, **kwargs).eval().to("cuda", dtype)
        side = INPUT_SIZE.get(name, 224)
        example = torch.randn(2, 3, side, side, device="cuda", dtype=dtype)
        with torch.no_grad():
            traced = torch.jit.trace(model, example, check_trace=False)
        path = os.path.join(out, f"{name}-{dtype_name}.pt")
        traced.save(path)
        return {"name": name, "dtype": dtype_name, "path": path, "input": [2, 3, side, side],
                "seconds": round(time.time() - started, 1)}
    except Exception as error:  # recorded in the manifest, the test reports it
        return {"name": name, "dtype": dtype_name, "error": f"{type(error).__name__}: {error}"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--set", choices=["families", "all"], default="families")
    parser.add_argument("--only", default="")
    parser.add_argument("--workers", type=int, default=6)
    args = parser.parse_args()
    import torchvision

    os.makedirs(args.out, exist_ok=True)
    names = sorted(torchvision.models.list_models(module=torchvision.models))
    if args.set == "families":
        names = [n for n in names if n in FAMILIES]
    if args.only:
        names = [n for n in names if n in set(args.only.split(","))]
    skipped = [{"name": n, "skipped": "larger than 300M parameters"} for n in names if n in TOO_LARGE]
    jobs = [(n, d, args.out) for n in names if n not in TOO_LARGE for d in ("float32", "float16")]
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.workers) as pool:
        results = pool.map(export, jobs, chunksize=1)
    manifest = {"torchvision": torchvision.__version__, "models": results, "skipped": skipped}
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    failed = [r for r in results if "error" in r]
    print(f"exported {len(results) - len(failed)} of {len(results)} (model, dtype) pairs to {args.out}; "
          f"{len(failed)} failed, {len(skipped)} skipped as too large")
    for r in failed:
        print(f"  {r['name']} {r['dtype']}: {r['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
