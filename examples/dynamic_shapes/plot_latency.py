"""Plots examples/dynamic_shapes' CSV: latency against sequence length, eager and Zenith.

    python3 plot_latency.py dynamic_shapes.csv dynamic_shapes.png
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # no display on the GPU machine
import matplotlib.pyplot as plt


def main(csv_path, png_path):
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        raise SystemExit(f"{csv_path} holds no steps")
    length = [int(r["length"]) for r in rows]
    figure, axes = plt.subplots(figsize=(7, 4.5))
    axes.scatter(length, [float(r["eager_ms"]) for r in rows], s=10, label="eager LibTorch")
    axes.scatter(length, [float(r["zenith_ms"]) for r in rows], s=10, label="Zenith")
    axes.scatter(length, [float(r["zenith_first_ms"]) for r in rows], s=6, marker="x",
                 label="Zenith, first call at the length")
    axes.set_xlabel("sequence length")
    axes.set_ylabel("latency per call (ms; dots: median of 3)")
    axes.set_title("Linear(1024, 1024) + ReLU, batch 32, a new length at every step")
    axes.legend()
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png_path, dpi=120)
    print(f"  wrote {png_path}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
