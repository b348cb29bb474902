"""Makes everything both sides of the suite read, so that every mode runs the same weights on the
same inputs:

  prepare.py data --dir D   weights (one file per model, random, seeded), inputs and Python eager
                            outputs per case (for a training case, the losses of its first steps
                            and the gradient norm after the first backward), and the TorchScript
                            trace of each inference case
  prepare.py aoti --dir D   the AOTInductor package of each case (slow: runs beside the C++ build)

Weights are float32 safetensors files with the C++ zoo's names, except the decoder's: float16 with
Hugging Face's names, which the C++ side reads through examples/models/llama_safetensors, as it
would read a downloaded TinyLlama checkpoint. A step that fails leaves <case>.<kind>.error with its
error, which the C++ runner reports as that mode's failure.
"""
import argparse
import json
import os
import sys
import time
import traceback
import zlib

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_models  # noqa: E402
import zoo  # noqa: E402
from cases import INFERENCE_WORKLOADS, PEER_WORKLOADS, load_cases  # noqa: E402


def seed_of(name):
    """A seed per weights file and per case, independent of the order things are made in."""
    return zlib.crc32(name.encode())


def write_error(folder, case, kind, error):
    with open(os.path.join(folder, f"{case['name']}.{kind}.error"), "w") as f:
        f.write(error)


def make_weights(folder, case, device):
    path = case_models.weights_path(folder, case)
    if os.path.exists(path):
        return
    torch.manual_seed(seed_of(case["weights"]))
    with torch.device(device):
        model = case_models.new_model(case)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if case["workload"] == "decode":
        state = {zoo.llama_hf_name(k): v.to(torch.float16) for k, v in state.items()}
    save_file(state, path)


def make_inputs(case, device):
    g = torch.Generator(device=device).manual_seed(seed_of(case["name"]))
    dtype, w = case["torch_dtype"], case["workload"]
    randn = lambda *shape: torch.randn(*shape, generator=g, device=device, dtype=dtype)  # noqa: E731
    randint = lambda high, *shape: torch.randint(high, shape, generator=g, device=device)  # noqa: E731
    if w == "elementwise":
        n = 1 << case["log2n"]
        return {name: randn(n) for name in ("x", "a", "b", "c")}
    if w == "sweep":
        lengths = torch.randint(case["min_seq"], case["max_seq"] + 1, (case["steps"],), generator=g, device=device)
        return {"lengths": lengths, "x": randn(case["batch"] * case["max_seq"] * case["features"])}
    if w == "bert":
        vocab = zoo.BERT_CONFIGS[case["config"]]["vocab_size"]
        return {"input_ids": randint(vocab, case["batch"], case["seq"]),
                "attention_mask": torch.ones(case["batch"], case["seq"], dtype=torch.long, device=device)}
    if w == "resnet":
        return {"images": randn(case["batch"], zoo.CNN_CONFIGS[case["config"]]["in_channels"], case["image"], case["image"])}
    if w == "decode":
        vocab = zoo.LLAMA_CONFIGS[case["config"]]["vocab_size"]
        return {"prompt": randint(vocab, 1, case["prompt"]), "tokens": randint(vocab, 1, case["new_tokens"])}
    if w == "training" and case["model"] == "cnn":
        c = zoo.CNN_CONFIGS[case["config"]]
        # float32 whatever the case's dtype: bfloat16 cases train under autocast, which casts.
        images = torch.randn(case["batch"], c["in_channels"], case["image"], case["image"], generator=g, device=device)
        return {"images": images, "labels": randint(c["num_classes"], case["batch"])}
    if w == "training" and case["model"] == "transformer6":
        vocab = zoo.BERT_CONFIGS[case["config"]]["vocab_size"]
        batch, seq = case["batch"], case["seq"]
        return {"input_ids": randint(vocab, batch, seq),
                "attention_mask": torch.ones(batch, seq, dtype=torch.long, device=device),
                "labels": randint(vocab, batch * seq)}
    raise ValueError(f"case {case['name']}: no inputs for workload {w}")


def eager_outputs(case, model, inputs, device):
    """Python eager's outputs, which C++ eager must reproduce."""
    w = case["workload"]
    with torch.inference_mode():
        if w == "sweep":
            lengths = inputs["lengths"].tolist()
            run = lambda i: model(case_models.sweep_input(case, inputs, lengths[i]))  # noqa: E731
            return {f"check{j}": run(len(lengths) - 3 + j) for j in range(3)}
        if w == "decode" and case_models.is_static_decode(case):
            k, v = case_models.static_cache(case, device)
            prompt = case["prompt"]
            logits = model(inputs["prompt"], case_models.positions(0, prompt, device), k, v)
            first = model(inputs["tokens"][:, :1], case_models.positions(prompt, 1, device), k, v)
            return {"prompt_logits": logits, "first_step_logits": first}
        if w == "decode":
            k, v = case_models.empty_cache(case, device)
            logits, k, v = model(inputs["prompt"], k, v)
            first, _, _ = model(inputs["tokens"][:, :1], k, v)
            return {"prompt_logits": logits, "first_step_logits": first}
        args = case_models.fixed_inputs(case, {k: _layout(case, t) for k, t in inputs.items()})
        name = {"elementwise": "y", "bert": "hidden", "resnet": "logits"}[w]
        return {name: model(*args)}


def training_outputs(folder, case, inputs, device):
    """Python eager's first losses and its gradient norm after the first backward: C++ eager and
    torch.compile check theirs against these."""
    module = case_models.load_training_step(folder, case, device)
    trainer = case_models.Trainer(module, module, case_models.training_inputs(case, inputs), case)
    losses, norm = trainer.first_steps(case_models.CHECKED_STEPS)
    return {"losses": torch.tensor(losses, dtype=torch.float64), "grad_norm": torch.tensor([norm], dtype=torch.float64)}


def _layout(case, t):
    return t.contiguous(memory_format=torch.channels_last) if case.get("channels_last") and t.dim() == 4 else t


def example_args(case, model_inputs, device):
    """The arguments a trace or an export is made with."""
    w = case["workload"]
    if w == "sweep":
        return (case_models.sweep_input(case, model_inputs, int(model_inputs["lengths"][0])),)
    if w == "decode" and case_models.is_static_decode(case):
        prompt = model_inputs["prompt"]
        return (prompt, case_models.positions(0, prompt.size(1), device), *case_models.static_cache(case, device))
    if w == "decode":
        return (model_inputs["prompt"], *case_models.empty_cache(case, device))
    return tuple(case_models.fixed_inputs(case, model_inputs))


def trace_torchscript(folder, case, model, model_inputs, device):
    path = os.path.join(folder, f"{case['name']}.ts.pt")
    try:
        with torch.no_grad():
            traced = torch.jit.trace(model, example_args(case, model_inputs, device), check_trace=False)
        traced.save(path)
    except Exception:  # the mode fails; the run goes on
        write_error(folder, case, "ts", traceback.format_exc(limit=3))


def prepare_data(folder, cases, device):
    for case in cases:
        start = time.time()
        if "weights" in case:
            make_weights(folder, case, device)
        inputs = make_inputs(case, device)
        inference = case["workload"] in INFERENCE_WORKLOADS
        if inference:
            model = case_models.load_model(folder, case, device)
            outputs = eager_outputs(case, model, inputs, device)
        else:
            outputs = training_outputs(folder, case, inputs, device)
        tensors = {f"input.{k}": v.contiguous() for k, v in inputs.items()}
        tensors.update({f"output.{k}": v.contiguous() for k, v in outputs.items()})
        save_file({k: v.cpu() for k, v in tensors.items()}, case_models.io_path(folder, case))
        if inference:
            model_inputs, _ = case_models.load_io(folder, case, device)
            trace_torchscript(folder, case, model, model_inputs, device)
        print(f"[prepare] {case['name']}: data{' and TorchScript' if inference else ''} in {time.time() - start:.1f} s",
              flush=True)


def export_program(case, model, args):
    """torch.export of the case: static shapes, except the sweep's sequence and the decoder's
    sequence and cache length, which vary in their workloads."""
    Dim = torch.export.Dim
    w = case["workload"]
    if w == "sweep":
        shapes = ({1: Dim("seq", min=case["min_seq"], max=case["max_seq"])},)
    elif w == "decode" and case_models.is_static_decode(case):
        # The number of new tokens varies (the prompt's, then one); the caches keep their size.
        # An example of 1 would be specialized: export at 3 tokens.
        seq = Dim("seq", min=1, max=case["prompt"])
        args = (args[0][:, :3], args[1][:3], args[2], args[3])
        shapes = ({1: seq}, {0: seq}, None, None)
    elif w == "decode":
        # Examples of 0 and 1 would be specialized: export at 3 new tokens over a 5-long cache.
        total = case["prompt"] + case["new_tokens"]
        seq, past = Dim("seq", min=1, max=case["prompt"]), Dim("past", min=0, max=total)
        k, v = args[1], args[2]
        example_k = torch.zeros(*k.shape[:3], 5, k.shape[4], dtype=k.dtype, device=k.device)
        args = (args[0][:, :3], example_k, example_k.clone())
        shapes = ({1: seq}, {3: past}, {3: past})
    else:
        shapes = None
    with torch.no_grad():
        return torch.export.export(model, args, dynamic_shapes=shapes)


def prepare_aoti(folder, cases, device, budget_s):
    deadline = time.time() + budget_s
    for case in cases:
        if time.time() > deadline:
            write_error(folder, case, "aoti", f"not compiled: the AOTInductor budget of {budget_s:.0f} s was spent")
            continue
        start = time.time()
        try:
            model = case_models.load_model(folder, case, device)
            inputs, _ = case_models.load_io(folder, case, device)
            program = export_program(case, model, example_args(case, inputs, device))
            path = os.path.join(folder, f"{case['name']}.aoti.pt2")
            torch._inductor.aoti_compile_and_package(program, package_path=path)
            with open(os.path.join(folder, f"{case['name']}.aoti.json"), "w") as f:
                json.dump({"compile_s": time.time() - start}, f)
            print(f"[prepare] {case['name']}: AOTInductor package in {time.time() - start:.1f} s", flush=True)
        except Exception:
            write_error(folder, case, "aoti", traceback.format_exc(limit=3))
            print(f"[prepare] {case['name']}: AOTInductor failed after {time.time() - start:.1f} s", flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # the next case's export needs the memory, not this model's


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["data", "aoti"])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (cases.json 'smoke')")
    parser.add_argument("--only", default="", help="comma-separated case or workload names")
    parser.add_argument("--order", default="", help="cases to do first, comma-separated (aoti)")
    parser.add_argument("--budget-s", type=float, default=1e9, help="stop starting new packages after this")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.dir, exist_ok=True)
    # Training has no TorchScript or AOTInductor mode: its files are data only.
    workloads = PEER_WORKLOADS if args.what == "data" else INFERENCE_WORKLOADS
    cases = [c for c in load_cases(args.smoke, set(filter(None, args.only.split(",")))) if c["workload"] in workloads]
    if args.what == "data":
        prepare_data(args.dir, cases, device)
    else:
        first = [name for name in args.order.split(",") if name]
        cases.sort(key=lambda c: first.index(c["name"]) if c["name"] in first else len(first))
        prepare_aoti(args.dir, cases, device, args.budget_s)


if __name__ == "__main__":
    main()
