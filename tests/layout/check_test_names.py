#!/usr/bin/env python3
"""Every test of a build has a name of its own, and none is labelled both cpu and gpu.

Two GoogleTest executables built from one source (a CPU and a CUDA variant) discover tests of the
same names; CTest then gives each of them the labels of both, and a CPU run (`ctest -LE gpu`, as
CI runs) skips the CPU variant without a word. This found 23 such tests in CI's build.

Usage: check_test_names.py CTEST BUILD_DIR   (lists the build's tests with CTEST)
       check_test_names.py --listing FILE     (a listing written by `ctest --show-only=json-v1`)
"""
import collections
import json
import subprocess
import sys


def labels_of(test):
    for prop in test.get("properties", []):
        if prop["name"] == "LABELS":
            return prop["value"]
    return []


def problems(tests):
    found = []
    counts = collections.Counter(test["name"] for test in tests)
    for name, count in sorted(counts.items()):
        if count > 1:
            found.append(f"{count} tests are named {name}: give one executable's tests a TEST_PREFIX")
    for test in tests:
        labels = labels_of(test)
        if "cpu" in labels and "gpu" in labels:
            found.append(f"{test['name']} is labelled both cpu and gpu: CPU runs skip it")
    return found


def main(argv):
    if len(argv) == 3 and argv[1] == "--listing":
        with open(argv[2]) as listing:
            text = listing.read()
    elif len(argv) == 3:
        text = subprocess.run([argv[1], "--test-dir", argv[2], "--show-only=json-v1"], check=True,
                              capture_output=True, text=True).stdout
    else:
        print(__doc__, file=sys.stderr)
        return 2
    tests = json.loads(text)["tests"]
    found = problems(tests)
    for line in found:
        print(line)
    print(f"{len(tests)} tests, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
