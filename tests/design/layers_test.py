"""docs/design.md's layer rules, checked on the sources.

The table under "The layers" lists each folder of src/ and the folders it depends on. This
test fails when a source file includes a header of a folder its own folder may not reach
(the transitive closure of the table's dependencies), when the table has a cycle or misses a
folder of src/, and when `megatron generate`, `megatron serve` or `megatron convert` reach a
train/ header through their includes.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]+)"', re.M)


def layer_table():
    text = open(os.path.join(ROOT, "docs", "design.md"), encoding="utf-8").read()
    section = text.split("## The layers", 1)[1].split("\n## ", 1)[0]
    deps = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([a-z_]+)/`\s*\|([^|]*)\|", line)
        if m:
            deps[m.group(1)] = [d.strip() for d in m.group(2).split(",")]
    for name in deps:
        deps[name] = [d for d in deps[name] if d in deps]
    return deps


def closure(deps):
    reach = {}

    def visit(name, path):
        if name in path:
            raise SystemExit("docs/design.md: the layer table has a cycle: " + " -> ".join(path + [name]))
        if name not in reach:
            out = set()
            for d in deps[name]:
                out.add(d)
                out |= visit(d, path + [name])
            reach[name] = out
        return reach[name]

    for name in deps:
        visit(name, [])
    return reach


def sources():
    for folder in sorted(os.listdir(SRC)):
        top = os.path.join(SRC, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for f in sorted(files):
                if f.endswith((".h", ".cpp", ".cu", ".cuh")):
                    yield folder, os.path.join(dirpath, f)


def main():
    deps = layer_table()
    reach = closure(deps)
    problems = []
    folders = {f for f in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, f))}
    for f in sorted(folders - set(deps)):
        problems.append(f"src/{f}/ is not in docs/design.md's layer table")
    includes = {}
    for folder, path in sources():
        rel = os.path.relpath(path, SRC)
        text = open(path, encoding="utf-8").read()
        includes[rel] = [f"{a}/{b}" for a, b in INCLUDE.findall(text)]
        if folder not in deps:
            continue
        for target in includes[rel]:
            other = target.split("/", 1)[0]
            if other != folder and other in deps and other not in reach[folder]:
                problems.append(f"src/{rel} includes {target}: {folder}/ may not depend on {other}/")
    # The inference and conversion commands do not reach the trainer.
    for command in ("cli/generate_command.cpp", "cli/serve_command.cpp", "cli/convert_command.cpp"):
        seen, todo = set(), [command]
        while todo:
            f = todo.pop()
            if f in seen or f not in includes:
                continue
            seen.add(f)
            todo.extend(includes[f])
        bad = sorted(f for f in seen if f.startswith("train/"))
        if bad:
            problems.append(f"src/{command} reaches {', '.join(bad)} through its includes")
    checked = sum(1 for _ in includes)
    if checked < 100:
        problems.append(f"only {checked} source files found under {SRC}")
    for p in problems:
        print(p)
    print(f"{checked} files, {len(deps)} layers checked; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
