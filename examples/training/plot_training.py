"""Plots the CSV of either training example, recognised by its columns.

    python3 plot_training.py gradient_stability.csv gradient_stability.png
    python3 plot_training.py lora_finetune.csv lora_finetune.png

gradient_stability: the gradient norms of eager and Zenith over the steps, and their relative
difference on a log-scale second axis. lora_finetune: the loss curves of eager and Zenith without
dropout, and of the Zenith runs with adapter dropout.
"""
import csv
import sys

try:
    import matplotlib

    matplotlib.use("Agg")  # no display on the GPU machine
    import matplotlib.pyplot as plt
except ImportError:
    plt = None


def column(rows, name):
    return [float(r[name]) for r in rows]


def plot_gradients(rows, axes):
    step = column(rows, "step")
    axes.plot(step, column(rows, "eager_norm"), label="eager LibTorch", linewidth=1.5)
    axes.plot(step, column(rows, "zenith_norm"), label="Zenith", linewidth=1, linestyle="--")
    axes.set_xlabel("step")
    axes.set_ylabel("gradient L2 norm")
    axes.set_yscale("log")
    relative = axes.twinx()
    # Zero (bitwise equal norms) cannot sit on a log axis: drawn at the bottom of the axis instead,
    # a decade under the smallest difference that is not zero.
    differences = column(rows, "rel_diff")
    floor = min([v for v in differences if v > 0], default=1e-9) / 10
    zero_note = " (bottom: equal)" if 0 in differences else ""
    relative.plot(step, [max(v, floor) for v in differences], color="tab:red", linewidth=0.6,
                  alpha=0.7, label="relative difference" + zero_note)
    relative.set_yscale("log")
    if not any(differences):
        relative.text(0.55, 0.92, "relative difference: 0 at every step (bitwise equal norms)", color="tab:red",
                      transform=relative.transAxes, ha="center")
    relative.set_ylim(bottom=floor)
    relative.set_ylabel("|zenith - eager| / eager", color="tab:red")
    relative.axvline(100, color="gray", linewidth=0.6, linestyle=":")
    lines, labels = axes.get_legend_handles_labels()
    more_lines, more_labels = relative.get_legend_handles_labels()
    axes.legend(lines + more_lines, labels + more_labels, loc="lower left")
    axes.set_title("Gradient norms, eager and through Zenith (same weights, same batch)")


def plot_losses(rows, axes):
    step = column(rows, "step")
    axes.plot(step, column(rows, "eager_loss_nodrop"), label="eager, dropout 0", linewidth=2)
    axes.plot(step, column(rows, "zenith_loss_nodrop"), label="Zenith, dropout 0", linewidth=1, linestyle="--")
    axes.plot(step, column(rows, "eager_loss_dropout"), label="eager, dropout 0.1", linewidth=1, alpha=0.6)
    axes.plot(step, column(rows, "zenith_loss_dropout"), label="Zenith, dropout 0.1", linewidth=1)
    axes.plot(step, column(rows, "zenith_loss_dropout_repeat"), label="Zenith, dropout 0.1, same seed again",
              linewidth=1, linestyle=":")
    axes.set_xlabel("step")
    axes.set_ylabel("causal LM cross-entropy")
    axes.legend()
    axes.set_title("LoRA fine-tune of a LLaMA decoder (q, k, v, o adapters)")


def main(csv_path, png_path):
    if plt is None:
        print("plot_training.py: matplotlib is not installed for this python; no plot written "
              "(pip install matplotlib, or run with a python that has it)", file=sys.stderr)
        return 3
    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows:
        print(f"plot_training.py: {csv_path} holds no steps", file=sys.stderr)
        return 1
    header = set(rows[0])
    figure, axes = plt.subplots(figsize=(8, 4.8))
    if "eager_norm" in header:
        plot_gradients(rows, axes)
    elif "zenith_loss_nodrop" in header:
        plot_losses(rows, axes)
    else:
        print(f"plot_training.py: {csv_path} is neither a gradient_stability nor a lora_finetune CSV "
              f"(columns: {', '.join(rows[0])})", file=sys.stderr)
        return 1
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(png_path, dpi=120)
    print(f"  wrote {png_path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
