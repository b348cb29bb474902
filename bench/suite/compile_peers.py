"""The Python peers of the suite: torch.compile in its default mode and in mode="reduce-overhead"
(CUDA graphs), on the weights and inputs prepare.py wrote, checked against Python eager's outputs
(which the C++ runner checks against C++ eager) and timed as the C++ runner times. Training cases
run one mode, "torch.compile (training)": the step module (model and loss) compiled, backward
through the compiled graph, the AdamW step eager, as in the C++ rows.

  compile_peers.py --dir D --out python.json [--wait-for FILE] [--budget-s S] [--seconds S]

Two phases, so that compiling can overlap other work but timing does not: first every case is
compiled and warmed up (first call, outputs checked, peak memory), then, once FILE exists (the
driver creates it when nothing else runs on the machine), every case is timed. The sweep runs
whole in the second phase, because how a mode meets new shapes is what it measures.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import case_models  # noqa: E402
from accuracy import check_close  # noqa: E402
from cases import PEER_WORKLOADS, load_cases  # noqa: E402
from timing import PeakMemory, summarize, time_calls, wall_ms  # noqa: E402

MODES = {"torch.compile": "default", "torch.compile reduce-overhead": "reduce-overhead"}
# Training rows name their workload, as the C++ rows "eager (training)" and "zenith (training)" do.
TRAINING_MODES = {"torch.compile (training)": "default"}
# A training step is long: timed as workload_training.cpp times it (its kMinTimedSteps, kMaxTimedSteps).
TRAINING_REPS = (5, 50)


def modes_of(case):
    return TRAINING_MODES if case["workload"] == "training" else MODES


def new_row(case, mode):
    return {"case": case["name"], "workload": case["workload"], "mode": mode, "side": "python", "status": "ok",
            "error": "", "median_ms": None, "p90_ms": None, "reps": 0, "first_call_ms": None, "setup_ms": None,
            "peak_mb": None, "reserved_mb": None, "max_rel_error": None, "extra": {}}


def fail(row, error):
    row["status"], row["error"] = "failed", error
    return row


def compiled(model, mode, case):
    # Fixed-shape cases compile for their one shape; the sweep and the decoder keep torch.compile's
    # default, which makes a dimension dynamic once it has seen it change.
    dynamic = None if case["workload"] in ("sweep", "decode") else False
    return torch.compile(model, mode=MODES[mode], dynamic=dynamic)


def invoker(fn, mode):
    """Calls `fn` as the mode's documentation asks: reduce-overhead replays CUDA graphs whose
    outputs the next replay overwrites, so each call starts a new step (the recipe PyTorch's
    error message gives); callers clone what they keep."""
    if MODES[mode] != "reduce-overhead":
        return fn

    def call(*args):
        torch.compiler.cudagraph_mark_step_begin()
        return fn(*args)

    return call


def cloned(outputs):
    """Outputs copied out: CUDA-graph outputs are overwritten by the graph's next replay."""
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    return [t.clone() for t in outputs]


class Fixed:
    """A fixed-shape case: compile and warm up now, time later."""

    def __init__(self, case, mode, model, args, reference, settings):
        self.row, self.settings = new_row(case, mode), settings
        memory = PeakMemory()
        start = time.perf_counter()
        self.fn = invoker(compiled(model, mode, case), mode)
        self.args = args
        self.row["setup_ms"] = (time.perf_counter() - start) * 1000
        self.row["first_call_ms"], out = wall_ms(lambda: cloned(self.fn(*args)))
        for _ in range(settings.warmup - 1):
            out = cloned(self.fn(*args))
        self.row["max_rel_error"] = check_close(out, reference, case["torch_dtype"], f"{mode} against eager")
        memory.record(self.row)
        if case["workload"] == "elementwise":
            self.row["extra"]["bytes_moved"] = 5.0 * (1 << case["log2n"]) * args[0].element_size()

    def finish(self):
        median, p90, _, reps = time_calls(lambda: self.fn(*self.args), self.settings.seconds, self.settings.min_reps,
                                          self.settings.max_reps)
        self.row.update(median_ms=median, p90_ms=p90, reps=reps)
        return self.row


def unique_graphs():
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


class Sweep:
    """The dynamic-shape sweep; everything happens in the timing phase."""

    def __init__(self, case, mode, model, inputs, reference, settings):
        self.case, self.mode, self.model, self.inputs, self.reference = case, mode, model, inputs, reference
        self.row = new_row(case, mode)

    def finish(self):
        case, row = self.case, self.row
        lengths, warmup = self.inputs["lengths"].tolist(), case["warmup_steps"]
        memory = PeakMemory()
        start = time.perf_counter()
        fn = invoker(compiled(self.model, self.mode, case), self.mode)
        row["setup_ms"] = (time.perf_counter() - start) * 1000
        ms, graphs_at_warmup = [], 0
        for i, length in enumerate(lengths):
            if i == warmup:
                graphs_at_warmup = unique_graphs()
            x = case_models.sweep_input(case, self.inputs, length)
            ms.append(wall_ms(lambda: fn(x))[0])
        graphs_after_warmup = unique_graphs() - graphs_at_warmup
        # The last three lengths again, as the C++ runner checks them.
        checked = [cloned(fn(case_models.sweep_input(case, self.inputs, n)))[0] for n in lengths[-3:]]
        memory.record(row)
        later = ms[warmup:]
        median, p90, worst, reps = summarize(later)
        xs = [float(v) for v in lengths[warmup:]]
        slope, r2 = fit_line(xs, later)
        ratio, slowest = slowest_against_similar_lengths(xs, later)
        row.update(first_call_ms=ms[0], median_ms=median, p90_ms=p90, reps=reps)
        if later:
            row["extra"].update(worst_over_similar_lengths=ratio, worst_over_similar_lengths_at=xs[slowest])
        row["extra"].update(worst_ms_after_warmup=worst, slope_ms_per_token=slope, r2=r2, warmup_steps=warmup,
                            per_step=[[length, t] for length, t in zip(lengths, ms)],
                            graphs_compiled_after_warmup=graphs_after_warmup)
        row["max_rel_error"] = check_close(checked, self.reference, case["torch_dtype"],
                                           f"{self.mode} against eager, last three lengths again")
        return row


def fit_line(x, y):
    """Least-squares slope and R^2 (bench/suite/line_fit.cpp)."""
    n = len(x)
    if n < 2:
        return 0.0, 0.0
    mx, my = sum(x) / n, sum(y) / n
    sxx = sum((a - mx) ** 2 for a in x)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0:
        return 0.0, 0.0
    return sxy / sxx, (1.0 if syy == 0 else sxy * sxy / (sxx * syy))


def slowest_against_similar_lengths(lengths, ms):
    """The step whose time is the largest multiple of the median time of the steps within 10% of
    its length, itself included: (ratio, index) (bench/suite/similar_lengths.cpp)."""
    slowest = (0.0, 0)
    for i, (length, t) in enumerate(zip(lengths, ms)):
        typical = statistics.median(u for other, u in zip(lengths, ms) if abs(other - length) * 10 <= length)
        if typical > 0 and t / typical > slowest[0]:
            slowest = (t / typical, i)
    return slowest


class Decode:
    """The decoder: a prompt, then one token per call with the KV cache; the first generation
    (compiling) now, whole warm generations later. In the static-cache form the caches are
    allocated once and zeroed before each generation, as generation code with a preallocated cache
    does; their addresses are marked static, as Hugging Face's static cache marks them, so that
    reduce-overhead's CUDA graphs may write them in place."""

    def __init__(self, case, mode, model, inputs, reference, settings):
        self.case, self.settings, self.inputs = case, settings, inputs
        self.row = new_row(case, mode)
        self.static = case_models.is_static_decode(case)
        device = inputs["prompt"].device
        if self.static:
            self.caches = case_models.static_cache(case, device)
            for cache in self.caches:
                torch._dynamo.mark_static_address(cache)
            prompt, new = case["prompt"], case["new_tokens"]
            self.prompt_positions = case_models.positions(0, prompt, device)
            self.step_positions = case_models.positions(prompt, new, device)
        memory = PeakMemory()
        start = time.perf_counter()
        self.fn = invoker(compiled(model, mode, case), mode)
        # The caches a step returns are the next step's inputs; under CUDA graphs the next replay
        # would overwrite them, so they are copied out (the static-cache form has none to copy).
        self.keep_caches = MODES[mode] == "reduce-overhead"
        self.row["setup_ms"] = (time.perf_counter() - start) * 1000
        prompt_ms, decode_ms, _ = self.generate()
        self.row["first_call_ms"] = prompt_ms
        self.row["extra"]["first_generation_ms"] = prompt_ms + decode_ms
        _, _, logits = self.generate()  # checked on a warm generation, as the C++ runner does
        self.row["max_rel_error"] = check_close(logits, reference, case["torch_dtype"], f"{mode} logits against eager")
        memory.record(self.row)
        self.row["extra"]["weight_bytes"] = float(sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                                                      if not name.endswith("embed_tokens.weight")))

    def generate(self):
        self.step_host_ms = 0.0  # the host's time inside the new tokens' step calls
        return self.generate_static() if self.static else self.generate_growing()

    def prompt_only(self):
        if self.static:
            k, v = self.caches
            k.zero_()  # as generate_static starts: those two fills are not a token's
            v.zero_()
            return self.fn(self.inputs["prompt"], self.prompt_positions, k, v)
        k, v = case_models.empty_cache(self.case, self.inputs["prompt"].device)
        return self.fn(self.inputs["prompt"], k, v)

    def launches_per_token(self):
        """Kernels a new token launches: a whole warm generation's under the profiler, less its
        prompt's alone (as the C++ runner counts them)."""
        def kernels(fn):
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=activities) as prof:
                fn()
                torch.cuda.synchronize()
            return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                       and not e.name.startswith(("Memcpy", "Memset")))
        return (kernels(self.generate) - kernels(self.prompt_only)) / self.case["new_tokens"]

    def generate_growing(self):
        def step(tokens, k, v):
            logits, k, v = self.fn(tokens, k, v)
            return (logits, k.clone(), v.clone()) if self.keep_caches else (logits, k, v)

        k, v = case_models.empty_cache(self.case, self.inputs["prompt"].device)
        prompt_ms, (logits, k, v) = wall_ms(lambda: step(self.inputs["prompt"], k, v))
        kept = cloned(logits)
        tokens = self.inputs["tokens"]

        def decode():
            nonlocal logits, k, v
            for i in range(tokens.size(1)):
                start = time.perf_counter()
                logits, k, v = step(tokens[:, i:i + 1], k, v)
                self.step_host_ms += (time.perf_counter() - start) * 1000
                if i == 0:
                    kept.extend(cloned(logits))

        decode_ms, _ = wall_ms(decode)
        return prompt_ms, decode_ms, kept

    def generate_static(self):
        k, v = self.caches
        k.zero_()
        v.zero_()
        prompt_ms, logits = wall_ms(lambda: self.fn(self.inputs["prompt"], self.prompt_positions, k, v))
        kept = cloned(logits)
        tokens = self.inputs["tokens"]

        def decode():
            for i in range(tokens.size(1)):
                start = time.perf_counter()
                logits = self.fn(tokens[:, i:i + 1], self.step_positions[i:i + 1], k, v)
                self.step_host_ms += (time.perf_counter() - start) * 1000
                if i == 0:
                    kept.extend(cloned(logits))

        decode_ms, _ = wall_ms(decode)
        return prompt_ms, decode_ms, kept

    def finish(self):
        per_token, prompts, host, start = [], [], [], time.perf_counter()
        passes = 1 if self.settings.smoke else 3
        while len(per_token) < passes or (time.perf_counter() - start < self.settings.seconds and len(per_token) < 10):
            prompt_ms, decode_ms, _ = self.generate()
            per_token.append(decode_ms / self.case["new_tokens"])
            host.append(self.step_host_ms / self.case["new_tokens"])
            prompts.append(prompt_ms)
        median, p90, _, reps = summarize(per_token)
        self.row.update(median_ms=median, p90_ms=p90, reps=reps)
        self.row["extra"].update(tokens_per_s=1000.0 / median, prompt_ms=summarize(prompts)[0],
                                 new_tokens=self.case["new_tokens"], prompt_tokens=self.case["prompt"],
                                 host_ms_per_token=summarize(host)[0])
        if torch.cuda.is_available():
            try:
                self.row["extra"]["launches_per_token"] = self.launches_per_token()
            except Exception as error:  # a count the profiler could not give: the row keeps its timings
                print(f"[compile_peers] {self.row['mode']}: no launch count ({error})", file=sys.stderr)
        return self.row


class Training:
    """A training case: compile the step module and take the first steps now, their losses and the
    gradient norm after the first backward checked against Python eager's (prepare.py's, which the
    C++ runner checks its eager against); time steps later."""

    def __init__(self, case, mode, folder, device, settings):
        self.case, self.settings = case, settings
        self.row = new_row(case, mode)
        inputs, outputs = case_models.load_io(folder, case, device)
        module = case_models.load_training_step(folder, case, device)
        total, without_embeddings = case_models.parameter_counts(module.model)
        self.row["extra"].update(parameters=total, parameters_without_embeddings=without_embeddings)
        memory = PeakMemory()
        start = time.perf_counter()
        fn = torch.compile(module, mode=TRAINING_MODES[mode], dynamic=False)
        self.row["setup_ms"] = (time.perf_counter() - start) * 1000
        self.trainer = case_models.Trainer(module, fn, case_models.training_inputs(case, inputs), case)
        expected = outputs["losses"].tolist()
        graphs_before = unique_graphs()
        self.row["first_call_ms"], loss = wall_ms(self.trainer.step)
        # More than one graph means graph breaks: parts of the step ran eagerly between them.
        self.row["extra"]["graphs_compiled"] = unique_graphs() - graphs_before
        norm = self.trainer.grad_norm()  # the first backward's: kept until the next zero_grad
        losses = [loss] + [self.trainer.step() for _ in range(len(expected) - 1)]
        self.row["extra"].update(losses=losses, grad_norm=norm)
        dtype, what = case["torch_dtype"], f"{mode} against Python eager"
        self.row["max_rel_error"] = max(
            check_close([torch.tensor(losses, dtype=torch.float64)], [outputs["losses"]], dtype,
                        f"{what}, losses of the first {len(expected)} steps {losses} against {expected}"),
            check_close([torch.tensor([norm], dtype=torch.float64)], [outputs["grad_norm"]], dtype,
                        f"{what}, gradient norm after the first backward {norm} against {outputs['grad_norm'].item()}"))
        for _ in range(len(expected), settings.warmup):
            self.trainer.step()
        memory.record(self.row)

    def finish(self):
        min_reps, max_reps = (1, 1) if self.settings.smoke else TRAINING_REPS
        median, p90, _, reps = time_calls(self.trainer.step, self.settings.seconds, min_reps, max_reps)
        self.row.update(median_ms=median, p90_ms=p90, reps=reps)
        self.row["extra"].update(steps_per_s=1000.0 / median, last_loss=self.trainer.last_loss)
        return self.row


def start_case(case, mode, folder, device, settings):
    if case["workload"] == "training":
        return Training(case, mode, folder, device, settings)
    model = case_models.load_model(folder, case, device)
    inputs, outputs = case_models.load_io(folder, case, device)
    w = case["workload"]
    if w == "sweep":
        return Sweep(case, mode, model, inputs, [outputs[f"check{j}"] for j in range(3)], settings)
    if w == "decode":
        return Decode(case, mode, model, inputs, [outputs["prompt_logits"], outputs["first_step_logits"]], settings)
    reference = list(outputs.values())
    return Fixed(case, mode, model, case_models.fixed_inputs(case, inputs), reference, settings)


def error_text():
    """The exception's message and where it was raised (an AssertionError has no message)."""
    kind, value, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    where = f" (raised at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return (traceback.format_exception_only(kind, value)[-1].strip() + where)[:2000]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--only", default="")
    parser.add_argument("--wait-for", default="", help="start timing once this file exists")
    parser.add_argument("--budget-s", type=float, default=1e9, help="start no compile after this many seconds")
    parser.add_argument("--timing-budget-s", type=float, default=1e9,
                        help="time no case once this many seconds have passed since timing began")
    parser.add_argument("--seconds", type=float, default=1.0, help="timed seconds per case and mode")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile every case and mode, time nothing (fills Inductor's caches: scripts/bench --prepare)")
    settings = parser.parse_args()
    settings.warmup, settings.min_reps, settings.max_reps = (1, 1, 1) if settings.smoke else (5, 10, 200)
    # One compiled module per case and mode stays alive until it is timed: room for all of them.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 4096
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    deadline = time.time() + settings.budget_s
    cases = [c for c in load_cases(settings.smoke, set(filter(None, settings.only.split(","))))
             if c["workload"] in PEER_WORKLOADS]
    rows, pending = [], []
    with torch.no_grad():
        for case in cases:
            for mode in modes_of(case):
                if time.time() > deadline:
                    row = fail(new_row(case, mode), "not started: the Python peers' time budget was spent")
                    row["status"] = "skipped"
                    rows.append(row)
                    continue
                start = time.time()
                try:
                    pending.append(start_case(case, mode, settings.dir, device, settings))
                    print(f"[peers] {case['name']} {mode}: compiled in {time.time() - start:.1f} s", flush=True)
                except Exception:
                    rows.append(fail(new_row(case, mode), error_text()))
                    print(f"[peers] {case['name']} {mode}: FAILED {rows[-1]['error']}", flush=True)
        if settings.compile_only:
            return
        while settings.wait_for and not os.path.exists(settings.wait_for):
            time.sleep(0.5)
        timing_deadline = time.time() + settings.timing_budget_s
        for p in pending:
            if time.time() > timing_deadline:
                rows.append(fail(p.row, "compiled but not timed: the Python peers' timing budget was spent"))
                rows[-1]["status"] = "skipped"
                continue
            try:
                rows.append(p.finish())
            except Exception:
                rows.append(fail(p.row, error_text()))
            r = rows[-1]
            print(f"[peers] {r['case']} {r['mode']}: {r['status']} median {r['median_ms']} ms {r['error'][:200]}", flush=True)
            with open(settings.out, "w") as f:  # after every case, so a stopped run keeps what it did
                json.dump({"results": rows}, f, indent=1)
    with open(settings.out, "w") as f:
        json.dump({"results": rows}, f, indent=1)


if __name__ == "__main__":
    main()
