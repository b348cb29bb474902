"""Plots the CSV of either training example, recognised by its columns.

    python3 plot_training.py gradient_stability.csv gradient_stability.png
    python3 plot_training.py lora_finetune.csv lora_finetune.png

gradient_stability: the gradient norms over the steps (eager, Zenith and, on independent
trajectories, the 1-ulp control) and below them the relative differences from eager with the
bounds of the criterion the run checks. lora_finetune: the loss curves of eager and Zenith without
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


WINDOW = 100  # gradient_stability's windows for criterion 2


def log_floor(values):
    """Where zero goes on a log axis: a decade under the smallest difference that is not zero."""
    return min([v for v in values if v > 0], default=1e-9) / 10


def plot_gradients(rows, figure):
    """gradient_stability: norms on top, relative differences below.

    Independent trajectories (a control_norm column): eager, Zenith and the 1-ulp control; below,
    Zenith's and the control's relative differences from eager and criterion 2's bound per window
    (2x the control's worst + 1e-6). --sync 1: eager and Zenith; below, the relative differences of
    the norms and of the losses, with criterion 1's bounds over the first 100 steps.
    """
    norms, relative = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1]})
    step = column(rows, "step")
    control = "control_norm" in rows[0]
    norms.plot(step, column(rows, "eager_norm"), label="eager LibTorch", linewidth=1.6, color="tab:blue")
    norms.plot(step, column(rows, "zenith_norm"), label="Zenith", linewidth=1, linestyle="--", color="tab:orange")
    if control:
        norms.plot(step, column(rows, "control_norm"), label="control: eager from weights moved by 1 ulp",
                   linewidth=1, linestyle=":", color="tab:green")
    norms.set_ylabel("gradient L2 norm")
    norms.set_yscale("log")
    norms.legend(loc="upper right", fontsize="small")
    norms.grid(alpha=0.3)

    if control:
        curves = [("rel_diff", "Zenith vs eager", "tab:orange"),
                  ("control_rel_diff", "control vs eager", "tab:green")]
    else:
        curves = [("rel_diff", "gradient norms", "tab:orange"), ("loss_rel_diff", "losses", "tab:purple")]
    values = {name: column(rows, name) for name, _, _ in curves}
    floor = log_floor([v for series in values.values() for v in series])
    for name, label, color in curves:
        zero = " (bottom: equal)" if 0 in values[name] else ""
        relative.plot(step, [max(v, floor) for v in values[name]], color=color, linewidth=0.7, alpha=0.85,
                      label=label + zero)
    if control:
        # Criterion 2's bound, a step per window.
        differences, reference = values["rel_diff"], values["control_rel_diff"]
        xs, ys = [], []
        for start in range(0, len(step), WINDOW):
            end = min(len(step), start + WINDOW)
            bound = 2 * max(reference[start:end]) + 1e-6
            xs += [step[start], step[end - 1]]
            ys += [bound, bound]
        relative.plot(xs, ys, color="black", linewidth=1, label="bound per 100-step window: 2 x control's worst + 1e-6")
        for start in range(WINDOW, len(step), WINDOW):
            relative.axvline(step[start] - 0.5, color="gray", linewidth=0.4, linestyle=":")
        relative.set_ylabel("|twin - eager| / |eager|")
        norms.set_title("Gradient norms on independent trajectories: eager, Zenith, 1-ulp control")
    else:
        last = min(len(step), WINDOW)
        relative.plot([step[0], step[last - 1]], [1e-4, 1e-4], color="tab:orange", linewidth=1, linestyle="--",
                      label="norm bound 1e-4 (steps 1-100)")
        relative.plot([step[0], step[last - 1]], [1e-5, 1e-5], color="tab:purple", linewidth=1, linestyle="--",
                      label="loss bound 1e-5 (steps 1-100)")
        relative.set_ylabel("|zenith - eager| / |eager|")
        norms.set_title("Gradients at the same weights every step (--sync 1): eager and Zenith")
    if not any(v for series in values.values() for v in series):
        relative.text(0.5, 0.5, "0 at every step (bitwise equal)", transform=relative.transAxes, ha="center")
    relative.set_yscale("log")
    relative.set_ylim(bottom=floor)
    relative.set_xlabel("step")
    relative.legend(loc="lower right", fontsize="small")
    relative.grid(alpha=0.3)


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
    if "eager_norm" in header:
        figure = plt.figure(figsize=(9, 7))
        plot_gradients(rows, figure)
    elif "zenith_loss_nodrop" in header:
        figure, axes = plt.subplots(figsize=(8, 4.8))
        plot_losses(rows, axes)
        axes.grid(alpha=0.3)
    else:
        print(f"plot_training.py: {csv_path} is neither a gradient_stability nor a lora_finetune CSV "
              f"(columns: {', '.join(rows[0])})", file=sys.stderr)
        return 1
    figure.tight_layout()
    figure.savefig(png_path, dpi=120)
    print(f"  wrote {png_path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
