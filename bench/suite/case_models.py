"""Building a case's model and inputs on the Python side from the files prepare.py wrote, exactly
as the C++ runner builds them from the same files (bench/suite/case_files.h), and stepping a
training case as the C++ runner steps it (bench/suite/workload_training.cpp)."""
import os

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

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
    if workload == "training":
        return training_model(case)
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
    if is_static_decode(case):
        model = zoo.LlamaStaticCache(model)
    return model


def is_static_decode(case):
    """A decode case run in the static-cache form: caches allocated once, written in place."""
    return case["workload"] == "decode" and case.get("static_cache", False)


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


def static_cache(case, device):
    """Zeroed key and value caches with a slot for every token of a generation (the prompt's and
    the new ones), for the static-cache form."""
    c = zoo.LLAMA_CONFIGS[case["config"]]
    shape = (c["num_layers"], 1, c["num_kv_heads"], case["prompt"] + case["new_tokens"], c["hidden_size"] // c["num_heads"])
    return (torch.zeros(shape, dtype=case["torch_dtype"], device=device),
            torch.zeros(shape, dtype=case["torch_dtype"], device=device))


def positions(start, count, device):
    """int64 positions start .. start + count - 1, for the static-cache form."""
    return torch.arange(start, start + count, dtype=torch.long, device=device)


def sweep_input(case, inputs, length):
    """A sweep step's input: the first batch*length*features elements of the one buffer, viewed."""
    b, f = case["batch"], case["features"]
    return inputs["x"].narrow(0, 0, b * length * f).view(b, length, f)


# --- Training (bench/suite/workload_training.cpp) -------------------------------------------------

# Losses prepare.py records, and so the steps every training row checks before it is timed (the C++
# runner checks as many as the io file holds).
CHECKED_STEPS = 3
# The inputs of each training model's step module, in order.
TRAINING_INPUTS = {"cnn": ["images", "labels"], "transformer6": ["input_ids", "attention_mask", "labels"]}


def training_model(case):
    """The model a training case trains: the CNN, or the BERT encoder cut to six layers."""
    if case["model"] == "cnn":
        return zoo.Cnn(zoo.CNN_CONFIGS[case["config"]])
    if case["model"] == "transformer6":
        return zoo.Bert(dict(zoo.BERT_CONFIGS[case["config"]], num_layers=6))
    raise ValueError(f"case {case['name']}: unknown training model {case['model']} (cnn, transformer6)")


class CnnStep(nn.Module):
    """The CNN and its loss in one forward (CnnStepImpl), so that a compiled call covers the loss."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, images, labels):
        return F.cross_entropy(self.model(images), labels)


class Transformer6Step(nn.Module):
    """The encoder and a masked-LM style loss over the tied token embedding (Transformer6StepImpl)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels):
        hidden = self.model(input_ids, attention_mask)
        logits = torch.matmul(hidden, self.model.embeddings.word_embeddings.weight.t())
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels)


def load_training_step(folder, case, device):
    """The case's step module with the weights of its file, float32 (bfloat16 cases train under
    autocast, as the C++ rows do), in training mode."""
    model = training_model(case)
    model.load_state_dict(load_file(weights_path(folder, case)), strict=True)
    step = CnnStep(model) if case["model"] == "cnn" else Transformer6Step(model)
    return step.to(device).train()


def training_inputs(case, inputs):
    """The step module's arguments, in order."""
    return [inputs[name] for name in TRAINING_INPUTS[case["model"]]]


def parameter_counts(model):
    """(parameters, parameters outside the embedding tables), as the C++ rows count them."""
    total = sum(p.numel() for p in model.parameters())
    embeddings = sum(p.numel() for name, p in model.named_parameters() if name.startswith("embeddings.") and p.dim() == 2)
    return total, total - embeddings


class Trainer:
    """One copy of a training case, stepped as the C++ rows step it: zero_grad, forward and loss
    (under autocast for bfloat16), backward, AdamW step. `fn` is the step module or its compiled form."""

    def __init__(self, module, fn, args, case):
        self.module, self.fn, self.args, self.case = module, fn, args, case
        # foreach=False is the per-parameter loop LibTorch's AdamW runs: the optimizer step costs
        # the same in every row, which then differ only in how forward, loss and backward run.
        self.optimizer = torch.optim.AdamW(module.parameters(), lr=case["lr"], foreach=False)
        self.device_type = args[0].device.type
        self.last_loss = None

    def step(self):
        """One training step; returns its loss."""
        with torch.enable_grad():
            self.optimizer.zero_grad()
            mixed = self.case["torch_dtype"] != torch.float32
            with torch.autocast(self.device_type, dtype=self.case["torch_dtype"], enabled=mixed):
                loss = self.fn(*self.args)
            loss.backward()
            self.optimizer.step()
        self.last_loss = loss.item()
        return self.last_loss

    def grad_norm(self):
        """The L2 norm of every gradient, in float64: after a step, that step's backward's."""
        squares = [p.grad.double().pow(2).sum() for p in self.module.parameters() if p.grad is not None]
        if not squares:
            raise ValueError("no parameter has a gradient after the first backward")
        return torch.stack(squares).sum().sqrt().item()

    def first_steps(self, count):
        """(losses of the next `count` steps, gradient norm after the first of them)."""
        losses = [self.step()]
        norm = self.grad_norm()
        losses += [self.step() for _ in range(count - 1)]
        return losses, norm
