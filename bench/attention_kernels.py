"""What each of PyTorch's attention kernels costs inside a CUDA graph, at BERT's sizes: the kernel
ATen chooses, and per kernel the device time of a call and the host time of launching a graph of
12 calls (cuDNN's attention nodes make a graph's launch much dearer than other kernels on an
H200, which is most of a graphed BERT-base b1 float16 call's host time: docs/performance.md,
issue 16 item 4). Then a correctness check: eager's error on operands that start one element
off a 16-byte boundary (views narrowed by one element), against the math backend in float64.

  python3 bench/attention_kernels.py [--batches 1,32] [--seq 128] [--dtypes float16,bfloat16,float32]

Query, key and value [B, 12, S, 64], an additive mask [B, 1, 1, S] of the query's dtype (as HF
BERT builds it; its last 5 keys hidden). Device us per call: a graph of 12 calls replayed 200
times between two events. Host us: the median time until CUDAGraph.replay() returns, the device
synchronized after each (300 replays), measured twice. Needs a CUDA device; plain PyTorch.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

CALLS = 12  # a graph's attention nodes: BERT-base's layers
BACKENDS = (("default", None), ("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION),
            ("efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH))


def backend_name(choice):
    for name in ("ERROR", "MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "OVERRIDEABLE"):
        if hasattr(SDPBackend, name) and int(getattr(SDPBackend, name)) == choice:
            return name.lower()
    return str(choice)


def attention(q, k, v, mask, backend):
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def graph_of(fn):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def host_us(graph, replays=300):
    times = []
    for _ in range(replays):
        start = time.perf_counter()
        graph.replay()
        times.append((time.perf_counter() - start) * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def device_us_per_call(graph, replays=200):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / replays / CALLS


def bert_operands(batch, seq, dtype):
    q, k, v = (torch.randn(batch, 12, seq, 64, device="cuda", dtype=dtype) for _ in range(3))
    mask = torch.zeros(batch, 1, 1, seq, device="cuda", dtype=dtype)
    mask[..., seq - 5:] = torch.finfo(dtype).min
    return q, k, v, mask


def float64_reference(q, k, v, mask):
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask.double())


def relative_error(got, reference):
    return ((got.double() - reference).abs().max() / reference.abs().max()).item()


def launch_table(batches, seq, dtypes):
    print("| dtype | batch | kernel | device us a call | host us, 12-node graph's launch (twice) | max rel. error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for dtype in dtypes:
        for batch in batches:
            q, k, v, mask = bert_operands(batch, seq, dtype)
            chosen = backend_name(torch._fused_sdp_choice(q, k, v, mask, 0.0, False))
            reference = float64_reference(q, k, v, mask)
            for name, backend in BACKENDS:
                label = f"default ({chosen})" if backend is None else name
                try:
                    error = relative_error(attention(q, k, v, mask, backend), reference)
                    graph = graph_of(lambda backend=backend: [attention(q, k, v, mask, backend) for _ in range(CALLS)])
                    print(f"| {dtype} | {batch} | {label} | {device_us_per_call(graph):.2f} | "
                          f"{host_us(graph):.1f}, {host_us(graph):.1f} | {error:.1e} |", flush=True)
                except RuntimeError as error:
                    print(f"| {dtype} | {batch} | {label} | - | - | refused: {str(error).splitlines()[0][:60]} |", flush=True)


def off_boundary(shape, dtype):
    count = math.prod(shape)
    return torch.randn(count + 1, device="cuda", dtype=dtype).narrow(0, 1, count).view(shape)


def misaligned_table(dtypes):
    # float32 is left out: its memory-efficient kernel reads such operands misaligned, a CUDA error
    # that ends the process's context (pytorch/pytorch#183484).
    print("\n| dtype | rows, keys | kernel | max rel. error, operands off 16-byte rows | on aligned copies |")
    print("| --- | --- | --- | --- | --- |")
    for dtype in (d for d in dtypes if d != torch.float32):
        for rows, keys in ((20, 90), (128, 128)):
            q, k, v = (off_boundary((1, 2, n, 64), dtype) for n in (rows, keys, keys))
            mask = torch.randn(1, 1, 1, keys, device="cuda", dtype=dtype)
            reference = float64_reference(q, k, v, mask)
            for name, backend in BACKENDS:
                cells = []
                for operands in ((q, k, v), (q.clone(), k.clone(), v.clone())):
                    try:
                        cells.append(f"{relative_error(attention(*operands, mask, backend), reference):.1e}")
                    except RuntimeError as error:
                        cells.append(f"refused: {str(error).splitlines()[0][:40]}")
                print(f"| {dtype} | {rows}, {keys} | {name} | {cells[0]} | {cells[1]} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_kernels.py needs a CUDA device")
    dtypes = [getattr(torch, name) for name in args.dtypes.split(",")]
    torch.manual_seed(0)
    with torch.no_grad():
        launch_table([int(b) for b in args.batches.split(",")], args.seq, dtypes)
        misaligned_table(dtypes)


if __name__ == "__main__":
    main()
