"""Building a case's model and inputs on the Python side from the files prepare.py wrote, exactly
as the C++ runner builds them from the same files (bench/suite/case_files.h)."""
import os

import torch
from safetensors.torch import load_file

import zoo


def weights_path(folder, case):
    return os.path.join(folder, f"{case['weights']}.weights.safetensors")


def io_path(folder, case):
    return os.path.join(folder, f"{case['name']}.io.safetensors")


def new_model(case):
    """The case's module with fresh (random) weights, float32, on the current default device."""
    workload = case["workload"]
    if workload == "elementwise":
        return zoo.Chain()
    if workload == "sweep":
        return zoo.LinearRelu(case["features"])
    if workload == "bert":
        return zoo.Bert(zoo.BERT_CONFIGS[case["config"]])
    if workload == "resnet":
        return zoo.Cnn(zoo.CNN_CONFIGS[case["config"]])
    if workload == "decode":
        return zoo.Llama(zoo.LLAMA_CONFIGS[case["config"]])
    raise ValueError(f"case {case['name']}: no Python model for workload {workload}")


def load_model(folder, case, device):
    """The case's module with the weights of its file, in the case's dtype and layout, eval mode."""
    model = new_model(case)
    if case["workload"] != "elementwise":
        state = load_file(weights_path(folder, case))
        if case["workload"] == "decode":
            state = {zoo.llama_zoo_name(k): v for k, v in state.items()}
        model.load_state_dict(state, strict=True)
    model = model.to(device=device, dtype=case["torch_dtype"]).eval()
    if case.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    return model


def load_io(folder, case, device):
    """(inputs by name, Python eager outputs by name) of the case's io file."""
    tensors = load_file(io_path(folder, case), device=str(device))
    inputs = {k[len("input."):]: v for k, v in tensors.items() if k.startswith("input.")}
    outputs = {k[len("output."):]: v for k, v in tensors.items() if k.startswith("output.")}
    if case.get("channels_last"):
        inputs = {k: v.contiguous(memory_format=torch.channels_last) for k, v in inputs.items()}
    return inputs, outputs


def fixed_inputs(case, inputs):
    """The forward arguments of a fixed-shape case, in order."""
    order = {"elementwise": ["x", "a", "b", "c"], "bert": ["input_ids", "attention_mask"], "resnet": ["images"]}
    return [inputs[name] for name in order[case["workload"]]]


def empty_cache(case, device):
    """Zero-length key and value caches for the decoder's first call."""
    c = zoo.LLAMA_CONFIGS[case["config"]]
    shape = (c["num_layers"], 1, c["num_kv_heads"], 0, c["hidden_size"] // c["num_heads"])
    return (torch.zeros(shape, dtype=case["torch_dtype"], device=device),
            torch.zeros(shape, dtype=case["torch_dtype"], device=device))


def sweep_input(case, inputs, length):
    """A sweep step's input: the first batch*length*features elements of the one buffer, viewed."""
    b, f = case["batch"], case["features"]
    return inputs["x"].narrow(0, 0, b * length * f).view(b, length, f)
