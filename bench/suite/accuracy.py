"""The suite's output check, as bench/suite/accuracy.h defines it: the largest absolute difference
over all outputs relative to the largest reference magnitude, within a tolerance per dtype."""
import torch

TOLERANCE = {torch.float32: 5e-3, torch.float16: 2e-2, torch.bfloat16: 5e-2}


def max_relative_error(got, expected):
    if len(got) != len(expected):
        raise ValueError(f"returned {len(got)} outputs, eager {len(expected)}")
    difference, scale = 0.0, 0.0
    for i, (g, e) in enumerate(zip(got, expected)):
        if g.shape != e.shape:
            raise ValueError(f"output {i} has shape {tuple(g.shape)}, eager's {tuple(e.shape)}")
        if e.numel() == 0:
            continue
        e, g = e.float(), g.to(e.device).float()
        difference = max(difference, (g - e).abs().max().item())
        scale = max(scale, e.abs().max().item())
    return difference / scale if scale > 0 else difference


def check_close(got, expected, dtype, what):
    error = max_relative_error(got, expected)
    if not error <= TOLERANCE[dtype]:
        raise ValueError(f"{what}: max relative error {error:.3g} exceeds {TOLERANCE[dtype]} for {dtype}")
    return error
