"""The CTest labels that tests/CMakeLists.txt promises, checked on this build's test set.

Reads `ctest --show-only=json-v1` in the build directory (the test's working directory) and
fails when a label selects nothing (unit, mpi, slow; gpu where the CUDA tests are built), when
a test carries no label, when a test executable whose source starts ranks under mpirun has a
case without `mpi` or a case of an executable that starts none has it, when an entry of
MT_SLOW_TESTS names no test (a renamed or removed test), or when `ctest -LE slow` (the quick
pass) is not smaller than the whole set.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests")
# Calls that start several ranks (tests/support/mpi.h, parity_runs.h, held_back_rank.h,
# comm/mpirun.h) and the launcher flag with a rank count: the same rule as tests/CMakeLists.txt.
MULTI_RANK = re.compile(r'relaunch_under_mpirun\(|run_ranks\(|mpirun_command\(|held_back_rank1_command\('
                        r'|--nproc-per-node[ ",]+[0-9]')


def cmake_list(name):
    text = open(os.path.join(TESTS, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"set\(" + name + r"\s+([^)]*)\)", text)
    return m.group(1).split() if m else []


def test_sources():
    """Executable name -> source text, for every tests/**/*_test.cpp."""
    out = {}
    for folder, _, files in os.walk(TESTS):
        for f in files:
            if f.endswith("_test.cpp"):
                path = os.path.join(folder, f)
                name = os.path.relpath(path, TESTS)[: -len(".cpp")].replace(os.sep, "_")
                out[name] = open(path, encoding="utf-8").read()
    return out


def main():
    ctest = os.environ.get("MT_CTEST", "ctest")
    shown = subprocess.run([ctest, "--show-only=json-v1"], capture_output=True, text=True, check=True)
    tests = json.loads(shown.stdout)["tests"]
    problems = []
    labels_of = {}
    executable_of = {}
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels_of[t["name"]] = set(props.get("LABELS", []))
        command = t.get("command") or [""]
        executable_of[t["name"]] = os.path.basename(command[0])
    if len(tests) < 100:
        problems.append(f"only {len(tests)} tests in this build")
    for name, labels in labels_of.items():
        if not labels:
            problems.append(f"{name} has no label")
    count = {label: sum(1 for ls in labels_of.values() if label in ls) for label in ("unit", "gpu", "mpi", "slow")}
    for label in ("unit", "mpi", "slow"):
        if count[label] == 0:
            problems.append(f"`ctest -L {label}` selects no test")
    sources = test_sources()
    built_gpu = any(executable_of[n].startswith(("backend_cuda_", "comm_cuda_", "train_cuda_")) for n in labels_of)
    if built_gpu and count["gpu"] == 0:
        problems.append("the cuda/ tests are built but `ctest -L gpu` selects none")
    for name, labels in labels_of.items():
        source = sources.get(executable_of[name])
        if source is None:
            continue  # a script test
        multi_rank = bool(MULTI_RANK.search(source))
        if multi_rank != ("mpi" in labels):
            problems.append(f"{name} ({executable_of[name]}): starts ranks: {multi_rank}, labels {sorted(labels)}")
    if not any(n.startswith("MpiCommunicator.") and "mpi" in labels_of[n] for n in labels_of):
        problems.append("no MpiCommunicator case carries `mpi`")
    names = set(labels_of) | set(executable_of.values())
    for slow in cmake_list("MT_SLOW_TESTS"):
        if slow not in names:
            problems.append(f"MT_SLOW_TESTS names {slow}, which is no test of this build")
    quick = sum(1 for ls in labels_of.values() if "slow" not in ls)
    if not 0 < quick < len(labels_of):
        problems.append(f"`ctest -LE slow` selects {quick} of {len(labels_of)} tests")
    for p in problems:
        print(p)
    print(f"{len(labels_of)} tests: {count['unit']} unit, {count['gpu']} gpu, {count['mpi']} mpi, "
          f"{count['slow']} slow; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
