#!/usr/bin/env python3
"""The exporter's two sets (export_models.py): --full-size exports the full-size models at their own
sizes and nothing of the default set, and a name that is not in the chosen set is refused with the
set's names instead of exporting nothing.

    test_exporter_sets.py OUT_DIR

Run by ctest (realmodels_exporter_sets). Exits non-zero, saying what differed, on a failure.
"""
import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models  # noqa: E402


def run_exporter(*args):
    """The exporter's exit status and what it wrote to stderr."""
    sys.argv = ["export_models.py", *args]
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        status = export_models.main()
    return status, errors.getvalue()


def main():
    out_dir = sys.argv[1]
    problems = []
    status, errors = run_exporter(out_dir, "--full-size", "--only", "tv_resnet50_224")
    with open(os.path.join(out_dir, "manifest.json")) as f:
        models = json.load(f)["models"]
    if status != 0 or [m["name"] for m in models] != ["tv_resnet50_224"]:
        problems.append(f"--full-size --only tv_resnet50_224 gave status {status} and {models} ({errors.strip()})")
    elif models[0].get("inputs", [{}])[0].get("shape") != [2, 3, 224, 224]:
        problems.append(f"tv_resnet50_224's traced input is {models[0].get('inputs')}, not 2 images of 224 pixels")
    elif not os.path.exists(os.path.join(out_dir, "tv_resnet50_224.pt")):
        problems.append("tv_resnet50_224.pt was not written")

    # The default set's name under --full-size, and the full-size set's without it.
    for args, name in ((["--full-size", "--only", "tv_resnet50"], "tv_resnet50"), (["--only", "hf_bert_base"], "hf_bert_base")):
        status, errors = run_exporter(out_dir, *args)
        if status != 2 or f"no model named {name}" not in errors or "its names:" not in errors:
            problems.append(f"{' '.join(args)} gave status {status} and {errors.strip()!r}, not a refusal naming it")

    with open(os.path.join(out_dir, "manifest.json")) as f:  # a refusal leaves the last export's manifest
        if [m["name"] for m in json.load(f)["models"]] != ["tv_resnet50_224"]:
            problems.append("a refused run rewrote the manifest")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
