#!/usr/bin/env python3
"""Does cuDNN's fused convolution (bias, residual add and ReLU in the convolution's epilogue:
torch.cudnn_convolution_relu / cudnn_convolution_add_relu, what zenith::convolution_relu runs on
CUDA, core/convolution_relu.h) beat a convolution followed by one elementwise pass over its result,
at ResNet-50 b64's convolution shapes? Channels-last; prints a Markdown table in microseconds.

    python3 bench/fused_convolution.py [--tf32] [--dtype float32|float16]

--tf32 lets cuDNN use TF32 (PyTorch's default for convolutions; off here unless asked)."""
import argparse

import torch

# (in channels, out channels, kernel, stride, input height and width) of ResNet-50's convolutions.
SHAPES = [(3, 64, 7, 2, 224), (64, 64, 1, 1, 56), (64, 64, 3, 1, 56), (64, 256, 1, 1, 56), (256, 64, 1, 1, 56),
          (256, 128, 1, 1, 56), (128, 128, 3, 2, 56), (128, 512, 1, 1, 28), (512, 128, 1, 1, 28),
          (128, 128, 3, 1, 28), (256, 256, 3, 1, 14), (256, 1024, 1, 1, 14), (1024, 256, 1, 1, 14),
          (512, 512, 3, 1, 7), (512, 2048, 1, 1, 7)]


def microseconds(fn, reps=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf32", action="store_true")
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = args.tf32
    dtype = getattr(torch, args.dtype)
    print(f"## {args.dtype}, batch {args.batch}, channels-last, TF32 {'on' if args.tf32 else 'off'}; us per call\n")
    print("| conv (cin, cout, k, s, hw) | conv | one elementwise pass (y + z) | cudnn_convolution_relu "
          "| cudnn_convolution_add_relu | largest difference from float32 |")
    print("| --- | --- | --- | --- | --- | --- |")
    cl = torch.channels_last
    for cin, cout, k, s, hw in SHAPES:
        x = torch.randn(args.batch, cin, hw, hw, device="cuda", dtype=dtype).contiguous(memory_format=cl)
        w = (torch.randn(cout, cin, k, k, device="cuda", dtype=dtype) / (cin * k * k) ** 0.5).contiguous(memory_format=cl)
        b = torch.randn(cout, device="cuda", dtype=dtype)
        pad = k // 2
        y = torch.nn.functional.conv2d(x, w, None, s, pad)
        z, out = torch.randn_like(y), torch.empty_like(y)
        conv = microseconds(lambda: torch.nn.functional.conv2d(x, w, None, s, pad))
        # What a fused add-bias-ReLU kernel after the convolution reads and writes: two maps in, one out.
        elementwise = microseconds(lambda: torch.add(y, z, out=out))
        relu = microseconds(lambda: torch.cudnn_convolution_relu(x, w, b, (s, s), (pad, pad), (1, 1), 1))
        add_relu = microseconds(lambda: torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, (s, s), (pad, pad), (1, 1), 1))
        want = torch.relu(torch.nn.functional.conv2d(x.float(), w.float(), b.float(), s, pad) + z.float())
        got = torch.cudnn_convolution_add_relu(x, w, z, 1.0, b, (s, s), (pad, pad), (1, 1), 1).float()
        print(f"| {cin}, {cout}, {k}, {s}, {hw} | {conv:.1f} | {elementwise:.1f} | {relu:.1f} | {add_relu:.1f} "
              f"| {(got - want).abs().max().item():.2e} |")


if __name__ == "__main__":
    main()
