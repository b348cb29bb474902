#!/usr/bin/env python3
"""Where ResNet-50 b1 float32's weight layout copies go, and what would remove them: at each of its
sixteen 3x3 convolutions (batch 1, the channels-last input Zenith's plan gives it), the convolution
with a channels-last weight (what a kept copy would give, at the memory kept_weight_fraction saves),
the weight's channels-last copy alone (ATen's, what each call runs now), the convolution with the
NCHW weight as the plan runs it (ATen copies it inside), the convolution with NCHW input and weight
(eager's; cuDNN's float32 kernels then transpose around the call), and a plain copy of the weight's
bytes (the bound any faster transpose kernel meets). The profile of 2026-11-30 (docs/performance.md,
the 02:57 run's section) read 0.071 ms a call of such copies; this says which of them to remove
and how. Prints a Markdown table in microseconds, and the sums over the sixteen.

Device time only, as in a graphed plan: each way is captured in one CUDA graph over enough distinct
weights (the same shape) that they pass L2 (50 MB on an H200; a call of the network streams its
100 MB of float32 weights from memory), and the graph's replays are timed. Timed call by call, as
the first form of this probe did, every row read the host's ~12 us of Python and dispatch.

    python3 bench/convolution_weight_layout.py [--batch 1] [--dtype float32|float16]

TF32 stays off, as in the benchmark suite's float32 rows."""
import argparse

import torch

L2_PASSING_BYTES = 150 << 20  # three times an H200's L2: a graph over this many bytes reads from memory

# (in channels, out channels, stride, input height and width, how many) of ResNet-50's 3x3
# convolutions, in network order.
SHAPES = [(64, 64, 1, 56, 3), (128, 128, 2, 56, 1), (128, 128, 1, 28, 3), (256, 256, 2, 28, 1),
          (256, 256, 1, 14, 5), (512, 512, 2, 14, 1), (512, 512, 1, 7, 2)]


def row(cin, cout, stride, size, batch, dtype):
    channels_last = torch.channels_last
    x = torch.randn(batch, cin, size, size, device="cuda", dtype=dtype)
    w = torch.randn(cout, cin, 3, 3, device="cuda", dtype=dtype)
    x_cl, w_cl = x.contiguous(memory_format=channels_last), w.contiguous(memory_format=channels_last)

    def conv(inp, weight):
        return lambda: torch.nn.functional.conv2d(inp, weight, stride=stride, padding=1)

    # Each way computes the same convolution: a layout that changed the result would show here.
    # Layouts run different algorithms, whose float32 sums differ in rounding; float16 results are
    # then rounded to 11 bits, a unit of which is 1e-3 of a value.
    tolerance = 1e-3 if dtype == torch.float32 else 1e-2
    want = conv(x, w)()
    for got in (conv(x_cl, w_cl)(), conv(x_cl, w)()):
        scale = want.abs().max().item()
        assert (got - want).abs().max().item() <= tolerance * scale, "a layout changed the convolution's result"
    # Enough distinct weights that a graph of them reads from memory, as the network does.
    count = max(4, min(1024, -(-L2_PASSING_BYTES // (w.numel() * w.element_size()))))
    ws = [torch.randn_like(w) for _ in range(count)]
    ws_cl = [v.contiguous(memory_format=channels_last) for v in ws]
    return {
        "conv, weight channels-last": graphed_microseconds([conv(x_cl, v) for v in ws_cl]),
        "weight copy alone": graphed_microseconds([lambda v=v: v.contiguous(memory_format=channels_last) for v in ws]),
        "conv, weight NCHW (now)": graphed_microseconds([conv(x_cl, v) for v in ws]),
        "conv, all NCHW (eager)": graphed_microseconds([conv(x, v) for v in ws]),
        "plain copy of the weight": graphed_microseconds([lambda v=v: v.clone() for v in ws]),
    }


def graphed_microseconds(fns, replays=10):
    """Device microseconds per call of `fns` (one each, in order), captured as one CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch.cuda.graphs asks
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (replays * len(fns)) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(0)  # the layouts' agreement check draws the same inputs on every run
    dtype = getattr(torch, args.dtype)
    print(f"{torch.cuda.get_device_name()}, PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"batch {args.batch}, {args.dtype}")
    columns = None
    sums = {}
    for cin, cout, stride, size, count in SHAPES:
        times = row(cin, cout, stride, size, args.batch, dtype)
        if columns is None:
            columns = list(times)
            print("| in, out, stride, size | count | " + " | ".join(columns) + " |")
            print("| --- | --- | " + " | ".join("---" for _ in columns) + " |")
        print(f"| {cin}, {cout}, {stride}, {size} | {count} | " + " | ".join(f"{times[c]:.1f}" for c in columns) + " |")
        for c in columns:
            sums[c] = sums.get(c, 0.0) + count * times[c]
    print("| all sixteen | 16 | " + " | ".join(f"{sums[c]:.1f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
