"""Merges the suite's results (the C++ runner's and the Python peers'), derives the figures that
need both (GB/s against the same run's copy bandwidth, percent of the weight-streaming bound,
speed-up over eager), and writes results.json, table.md and chart.png; prints the table.

  report.py --cpp cpp.json --python python-0.json ... --dir D --out OUT [--commit SHA] [--device NAME]
"""
import argparse
import datetime
import json
import os

import torch


def load_rows(path):
    if not path or not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)["results"]


def by_key(rows):
    return {(r["case"], r["mode"]): r for r in rows}


def eager_mode(row):
    """The row every mode of the row's case is compared with."""
    return "eager (training)" if row["workload"] == "training" else "eager"


def derive(rows, folder):
    """Adds GB/s, percent of copy, percent of the weight-streaming bound and speed-up over eager."""
    keyed = by_key(rows)

    def bandwidth(copy):
        """Bytes a second of a "device copy" row, or None."""
        return copy["extra"]["bytes_moved"] / (copy["median_ms"] / 1000) if copy and copy.get("median_ms") else None

    copy_bytes_per_s = bandwidth(keyed.get(("chain_f32", "device copy")))
    for r in rows:
        x, ms = r["extra"], r.get("median_ms")
        reference = eager_mode(r)
        eager = keyed.get((r["case"], reference))
        if ms and eager and eager.get("median_ms") and r["mode"] not in (reference, "device copy"):
            r["speedup_vs_eager"] = eager["median_ms"] / ms
        if ms and "bytes_moved" in x:
            x["gb_per_s"] = x["bytes_moved"] / (ms / 1000) / 1e9
            copy = keyed.get((r["case"], "device copy"))
            if copy and copy.get("median_ms"):
                x["pct_of_copy"] = 100 * x["gb_per_s"] / (copy["extra"]["bytes_moved"] / (copy["median_ms"] / 1000) / 1e9)
        # The decoders' own copy (device_copy.h), the chain's where a run has none of its own.
        streaming = bandwidth(keyed.get((r["case"], "device copy"))) or copy_bytes_per_s
        if ms and "weight_bytes" in x and streaming:
            x["copy_gb_per_s"] = streaming / 1e9
            x["bound_ms_per_token"] = 1000 * x["weight_bytes"] / streaming
            x["pct_of_bound"] = 100 * x["bound_ms_per_token"] / ms
        if r["mode"] == "aoti":
            compile_info = os.path.join(folder, f"{r['case']}.aoti.json")
            if os.path.exists(compile_info):
                with open(compile_info) as f:
                    x["package_compile_s"] = json.load(f)["compile_s"]
    if copy_bytes_per_s is None:  # a run without the chain: the first copy of its own
        copy_bytes_per_s = next((bandwidth(r) for r in rows if r["mode"] == "device copy" and bandwidth(r)), None)
    return copy_bytes_per_s


def streaming_bounds(rows):
    """A line under the decoder table: per case, the copy bandwidth its bound divides by."""
    cases = {}
    for r in ordered(rows, {"decode"}):
        x = r["extra"]
        if "bound_ms_per_token" in x and r["case"] not in cases:
            cases[r["case"]] = f"{r['case']} {fmt(x['copy_gb_per_s'], 0)} GB/s, {fmt(x['bound_ms_per_token'])} ms a token"
    if not cases:
        return "\n\nNo copy bandwidth was measured in this run: the bound is not reported."
    return ("\n\nThe bound: the weights read once a token at the device copy bandwidth measured in this run ("
            + "; ".join(cases.values()) + ").")


def fmt(value, digits=3):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}" if abs(value) >= 0.01 or value == 0 else f"{value:.2e}"


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in line) + " |" for line in lines]
    return "\n".join(out)


MODE_ORDER = ["device copy", "eager", "torchscript", "zenith", "aoti", "torch.compile",
              "torch.compile reduce-overhead", "eager (training)", "zenith (training)", "torch.compile (training)"]
TRAINING_SUFFIX = " (training)"


def ordered(rows, workloads):
    chosen = [r for r in rows if r["workload"] in workloads]
    case_order = []
    for r in chosen:
        if r["case"] not in case_order:
            case_order.append(r["case"])
    rank = lambda r: (case_order.index(r["case"]), MODE_ORDER.index(r["mode"]) if r["mode"] in MODE_ORDER else 99)  # noqa: E731
    return sorted(chosen, key=rank)


def parameters(x):
    if "parameters" not in x:
        return ""
    return f"{x['parameters'] / 1e6:.1f}M ({x['parameters_without_embeddings'] / 1e6:.1f}M)"


def training_note(r):
    """Zenith's row says whether it ran compiled; eager's, how close it came to Python eager, which
    torch.compile's row is checked against."""
    x = r["extra"]
    if "note" in x:
        return x["note"]
    if "python_eager_rel_error" in x:
        return f"against Python eager: rel. error {fmt(x['python_eager_rel_error'])}"
    return ""


def greedy(x):
    """How many of a greedy generation's tokens are eager's; where the first differs, eager's gap
    between its two best logits there and how far the mode's logits were from eager's (a rounding
    flip needs the difference to reach half the gap). '-' where the mode did not generate greedily
    (the Python peers)."""
    if "greedy_tokens" not in x:
        return "-"
    text = f"{x['greedy_tokens_matched']} of {x['greedy_tokens']}"
    if "greedy_divergence_margin" in x:
        text += (f" (then eager's top two {fmt(x['greedy_divergence_margin'])} apart,"
                 f" logits {fmt(x['greedy_divergence_logit_diff'])} off)")
    return text


def similar_lengths(r):
    """The sweep's stall check: the worst step over the median of the steps within 10% of its
    length, and that step's length (bench/suite/similar_lengths.h)."""
    x = r["extra"]
    if "worst_over_similar_lengths" not in x:
        return "-"
    return f"{fmt(x['worst_over_similar_lengths'], 2)}x at {int(x['worst_over_similar_lengths_at'])}"


def peak(r):
    """Peak device memory above the mode's start, allocated / reserved (timing.h's PeakMemory)."""
    return fmt(r["peak_mb"], 0) + " / " + fmt(r.get("reserved_mb"), 0)


def held(r):
    """Allocated MB held between calls after warm-up / a warm call's peak above that (C++ modes)."""
    x = r["extra"]
    if "held_mb" not in x:
        return ""
    kept = (x.get("plan") or {}).get("kept_mb")
    text = fmt(x["held_mb"], 0) + " / " + fmt(x.get("warm_call_peak_mb"), 0)
    return text + (f" (kept {fmt(kept, 0)})" if kept is not None else "")


def status_or(r, text):
    return text if r["status"] == "ok" else r["status"].upper()


def sections(rows):
    ok = lambda r: r["status"] == "ok"  # noqa: E731
    parts = []
    parts.append("### Elementwise chain y = gelu(x*a + b)*c, 2^26 elements\n\n" + table(
        ["case", "mode", "median ms", "p90 ms", "GB/s", "% of copy", "first call ms", "rel. error"],
        [[r["case"], r["mode"], status_or(r, fmt(r["median_ms"])), fmt(r["p90_ms"]),
          fmt(r["extra"].get("gb_per_s"), 0), fmt(r["extra"].get("pct_of_copy"), 0), fmt(r["first_call_ms"], 1),
          fmt(r["max_rel_error"])] for r in ordered(rows, {"elementwise"})]))
    parts.append("### Dynamic shapes: Linear(1024,1024)+ReLU, batch 32, a new seq_len in 100..1000 every step\n\n" + table(
        ["mode", "first call ms", "median ms", "p90 ms", "worst after warm-up ms",
         "worst step / median of lengths within 10%", "slope ms/token", "R^2",
         "recaptures / NVRTC / graphs after warm-up", "peak MB allocated / reserved"],
        [[r["mode"], status_or(r, fmt(r["first_call_ms"], 1)), fmt(r["median_ms"]), fmt(r["p90_ms"]),
          fmt(r["extra"].get("worst_ms_after_warmup")), similar_lengths(r),
          fmt(r["extra"].get("slope_ms_per_token"), 5), fmt(r["extra"].get("r2")),
          " / ".join(str(r["extra"][k]) if k in r["extra"] else "-" for k in
                     ("recaptures_after_warmup", "nvrtc_compiles_after_warmup", "graphs_compiled_after_warmup")),
          peak(r)] for r in ordered(rows, {"sweep"})]))
    parts.append("### BERT-base (sequence 128) and ResNet-50 (224x224) inference\n\n" + table(
        ["case", "mode", "median ms", "p90 ms", "vs eager", "first call ms", "setup ms", "peak MB allocated / reserved",
         "held MB / warm call's peak MB", "rel. error"],
        [[r["case"], r["mode"], status_or(r, fmt(r["median_ms"])), fmt(r["p90_ms"]),
          fmt(r.get("speedup_vs_eager"), 2) + ("x" if r.get("speedup_vs_eager") else ""), fmt(r["first_call_ms"], 1),
          fmt(r["setup_ms"], 1), peak(r), held(r), fmt(r["max_rel_error"])] for r in ordered(rows, {"bert", "resnet"})]))
    parts.append("### TinyLlama-shaped decoder, float16, batch 1: 128-token prompt, then 128 tokens with a KV cache "
                 "(decode_f16: the cache grows by concatenation; decode_static_f16: allocated once, written in place)\n\n" + table(
        ["case", "mode", "tokens/s", "% of weight-streaming bound", "ms/token median", "p90", "launches/token",
         "host ms/token", "prompt ms", "first generation ms", "peak MB allocated / reserved",
         "held MB / warm generation's peak MB", "rel. error", "greedy tokens as eager's"],
        [[r["case"], r["mode"], status_or(r, fmt(r["extra"].get("tokens_per_s"), 1)), fmt(r["extra"].get("pct_of_bound"), 1),
          fmt(r["median_ms"]), fmt(r["p90_ms"]), fmt(r["extra"].get("launches_per_token"), 1),
          fmt(r["extra"].get("host_ms_per_token"), 3), fmt(r["extra"].get("prompt_ms"), 2),
          fmt(r["extra"].get("first_generation_ms"), 0), peak(r), held(r), fmt(r["max_rel_error"]),
          greedy(r["extra"])]
         for r in ordered(rows, {"decode"}) if r["mode"] != "device copy"]) + streaming_bounds(rows))
    parts.append("### Training step (forward, loss, backward, AdamW): eager, the model and loss through Zenith and "
                 "through torch.compile; the first steps' losses and gradient norm checked against eager\n\n" + table(
        ["case", "mode", "steps/s", "median ms", "p90 ms", "vs eager", "first call ms", "peak MB allocated / reserved",
         "parameters (without embeddings)", "rel. error", "note"],
        [[r["case"], r["mode"], status_or(r, fmt(r["extra"].get("steps_per_s"), 2)), fmt(r["median_ms"]),
          fmt(r["p90_ms"]), fmt(r.get("speedup_vs_eager"), 2) + ("x" if r.get("speedup_vs_eager") else ""),
          fmt(r["first_call_ms"], 1), peak(r), parameters(r["extra"]), fmt(r["max_rel_error"]),
          training_note(r)] for r in ordered(rows, {"training"})]))
    failed = [r for r in rows if not ok(r)]
    parts.append("### Modes that failed or were skipped\n\n" + (table(
        ["case", "mode", "status", "error"], [[r["case"], r["mode"], r["status"], r["error"][:300]] for r in failed])
        if failed else "None."))
    return "\n\n".join(parts) + "\n"


def chart(rows, path):
    """Speed-up over eager per case and mode, log scale; failed modes get no bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    # A training mode shares its inference mode's bar: "zenith (training)" is Zenith's bar there.
    modes = [m for m in MODE_ORDER if m not in ("device copy", "eager") and not m.endswith(TRAINING_SUFFIX)]
    cases = []
    for r in rows:
        if r.get("speedup_vs_eager") and r["case"] not in cases:
            cases.append(r["case"])
    keyed = by_key(rows)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(cases)), 4.5))
    width = 0.8 / len(modes)
    for i, mode in enumerate(modes):
        values = [(keyed.get((c, mode)) or keyed.get((c, mode + TRAINING_SUFFIX)) or {}).get("speedup_vs_eager") or 0
                  for c in cases]
        ax.bar([j + i * width for j in range(len(cases))], values, width, label=mode)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%.2gx"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cases))])
    ax.set_xticklabels(cases, rotation=30, ha="right")
    ax.set_ylabel("speed-up over eager LibTorch (median)")
    ax.set_title("Zenith benchmark suite: higher is faster; missing bar = failed or not run")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpp", required=True)
    parser.add_argument("--python", nargs="*", default=[], help="the Python peers' result files")
    parser.add_argument("--dir", required=True, help="prepare.py's folder (AOTInductor compile times)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default="")
    parser.add_argument("--device", default="")
    args = parser.parse_args()
    rows = load_rows(args.cpp) + [row for path in args.python for row in load_rows(path)]
    copy_bytes_per_s = derive(rows, args.dir)
    meta = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "commit": args.commit, "device": args.device, "torch": torch.__version__,
            "copy_gb_per_s_f32": copy_bytes_per_s / 1e9 if copy_bytes_per_s else None}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": rows}, f, indent=1)
    text = (f"Measured {meta['date_utc']} UTC on {meta['device'] or 'an unnamed device'}, PyTorch {meta['torch']}, "
            f"tree of commit {meta['commit'] or 'unknown'}.\n\n" + sections(rows))
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    try:
        chart(rows, os.path.join(args.out, "chart.png"))
    except Exception as error:  # the table matters more than the picture
        text += f"\n(chart not drawn: {error})\n"
    print(text)


if __name__ == "__main__":
    main()
