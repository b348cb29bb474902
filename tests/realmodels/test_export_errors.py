#!/usr/bin/env python3
"""The exporter's per-model failures (export_models.py): a model that cannot be built is recorded in
the manifest with its reason, and the models after it are still exported.

    test_export_errors.py OUT_DIR

Run by ctest (realmodels_export_errors). Exits non-zero, saying what differed, on a failure.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_models  # noqa: E402


def unbuildable():
    raise RuntimeError("no such model in this transformers\nsecond line of the error")


def main():
    out_dir = sys.argv[1]
    export_models.MODELS.insert(0, ("unbuildable", "transformers", unbuildable))
    sys.argv = ["export_models.py", out_dir, "--only", "unbuildable,tv_squeezenet"]
    if export_models.main() != 0:
        print("the exporter failed as a whole")
        return 1
    with open(os.path.join(out_dir, "manifest.json")) as f:
        models = {m["name"]: m for m in json.load(f)["models"]}
    problems = []
    error = models.get("unbuildable", {}).get("export_error", "")
    if error != "RuntimeError: no such model in this transformers":
        problems.append(f"the unbuildable model's export_error is {error!r}")
    exported = models.get("tv_squeezenet", {})
    if "export_error" in exported or not os.path.exists(os.path.join(out_dir, exported.get("file", "missing"))):
        problems.append(f"the model after it was not exported: {exported}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
