#!/usr/bin/env python3
"""Lists the option strings of Megatron-LM's megatron/training/arguments.py.

Every literal string of an add_argument('--x', '--y', ...) call (aliases and the --no- forms
included), one per line with its arity: "switch" (an action that takes no value), "list"
(nargs '+', '*' or a number above 1) or "value". Also the options arguments.py builds from
dataclasses with ArgumentGroupFactory (megatron/training/argument_utils.py): one per field not
excluded and not init=False, "--field-name", a bool field defaulting to False a switch of that
name, any other bool field the switches --no-field-name and --disable-field-name, a list field
a list; a field's metadata "argparse_meta" overrides arg_names, nargs and action.

  python3 tools/megatron_flags.py /work/.mirror/NVIDIA+Megatron-LM/repo > tests/cli/fixtures/megatron_flags.txt
"""
import ast
import re
import subprocess
import sys

PATH = "megatron/training/arguments.py"
SWITCH_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


def arity(call):
    for kw in call.keywords:
        if kw.arg == "action" and isinstance(kw.value, ast.Constant) and kw.value.value in SWITCH_ACTIONS:
            return "switch"
        if kw.arg == "nargs" and isinstance(kw.value, ast.Constant):
            n = kw.value.value
            if n in ("+", "*") or (isinstance(n, int) and n > 1):
                return "list"
    return "value"


def git_show(repo, commit, path):
    return subprocess.check_output(["git", "-C", repo, "show", f"{commit}:{path}"], text=True)


def find_class(repo, commit, name):
    out = subprocess.check_output(["git", "-C", repo, "grep", "-l", f"^class {name}\\b", commit, "--", "megatron/*.py"],
                                  text=True)
    path = out.split()[0].split(":", 1)[1]
    for node in ast.walk(ast.parse(git_show(repo, commit, path))):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise SystemExit(f"class {name} not found")


def const(node, default=None):
    return node.value if isinstance(node, ast.Constant) else default


def dataclass_fields(repo, commit, name):
    """{field: (annotation text, default constant or None, init, argparse_meta dict of constants)}."""
    cls = find_class(repo, commit, name)
    fields = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id.endswith("Config"):
            fields.update(dataclass_fields(repo, commit, base.id))
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        ann = ast.unparse(st.annotation)
        if ann.startswith("ClassVar"):
            continue
        default, init, meta = None, True, {}
        v = st.value
        if isinstance(v, ast.Call) and ast.unparse(v.func).endswith("field"):
            for kw in v.keywords:
                if kw.arg == "default":
                    default = const(kw.value)
                elif kw.arg == "init":
                    init = const(kw.value, True)
                elif kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                    for k, mv in zip(kw.value.keys, kw.value.values):
                        if const(k) == "argparse_meta" and isinstance(mv, ast.Dict):
                            for mk, mvv in zip(mv.keys, mv.values):
                                try:
                                    meta[const(mk)] = ast.literal_eval(mvv)
                                except ValueError:
                                    meta[const(mk)] = ast.unparse(mvv)
        elif v is not None:
            default = const(v)
        fields[st.target.id] = (ann, default, init, meta)
    return fields


def factory_flags(repo, commit, tree):
    """The options of every ArgumentGroupFactory(Class, exclude=...) call in arguments.py."""
    flags = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        lists = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        lists[t.id] = [const(e) for e in node.value.elts]
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "ArgumentGroupFactory"):
                continue
            exclude = set()
            for kw in node.keywords:
                if kw.arg == "exclude":
                    exclude = set(lists[kw.value.id] if isinstance(kw.value, ast.Name)
                                  else [const(e) for e in kw.value.elts])
            for name, (ann, default, init, meta) in dataclass_fields(repo, commit, node.args[0].id).items():
                if name in exclude or not init:
                    continue
                base = "--" + name.replace("_", "-")
                names = [base]
                kind = "list" if re.match(r"(Optional\[)?[lL]ist\[", ann) or "list[" in ann.split("|")[0].lower() else "value"
                is_bool = re.fullmatch(r"bool|Optional\[bool\]|bool \| None", ann) is not None
                if is_bool:
                    kind = "switch"
                    if default is not False:
                        names = ["--no-" + name.replace("_", "-"), "--disable-" + name.replace("_", "-")]
                if "arg_names" in meta:
                    names = meta["arg_names"]
                if meta.get("nargs") in ("+", "*"):
                    kind = "list"
                if meta.get("action") in SWITCH_ACTIONS:
                    kind = "switch"
                for n in names:
                    flags[n] = kind
    return flags


def main():
    repo = sys.argv[1]
    commit = subprocess.check_output(["git", "-C", repo, "rev-parse", "HEAD"], text=True).strip()
    source = subprocess.check_output(["git", "-C", repo, "show", f"{commit}:{PATH}"], text=True)
    tree = ast.parse(source)
    flags = factory_flags(repo, commit, tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        kind = arity(node)
        for a in node.args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                flags[a.value] = kind
    print(f"# Option strings of Megatron-LM {PATH} at commit {commit} ({len(flags)})")
    print("# (generated by tools/megatron_flags.py; one flag and its arity per line)")
    for name in sorted(flags):
        print(name, flags[name])


if __name__ == "__main__":
    main()
