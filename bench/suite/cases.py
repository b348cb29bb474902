"""The suite's cases (cases.json), shared with the C++ runner so that both sides agree on sizes."""
import json
import os

import torch

CASES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# Inference workloads: prepare.py traces them for TorchScript and packages them for AOTInductor.
INFERENCE_WORKLOADS = ("elementwise", "sweep", "bert", "resnet", "decode")
# The workloads the Python peers run (torch.compile), and so the ones prepare.py writes files for.
PEER_WORKLOADS = INFERENCE_WORKLOADS + ("training",)


def load_cases(smoke=False, only=None):
    """The cases, smoke sizes applied when asked, filtered by case or workload names in `only`."""
    with open(CASES_PATH) as f:
        entries = json.load(f)["cases"]
    cases = []
    for entry in entries:
        case = {k: v for k, v in entry.items() if k != "smoke"}
        if smoke:
            case.update(entry.get("smoke", {}))
        if only and case["name"] not in only and case["workload"] not in only:
            continue
        case["torch_dtype"] = DTYPES[case["dtype"]]
        cases.append(case)
    return cases
