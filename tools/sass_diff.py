#!/usr/bin/env python3
"""Per-function SASS of two builds, compared: did a change to the CUDA sources change the code?

    tools/sass_diff.py OLD.so NEW.so [--rename old=new ...] [--rename-re pattern=replacement ...]

Each binary's SASS (cuobjdump -sass, nvdisasm on PATH) is split per architecture and kernel;
addresses and encodings are dropped, names demangled (c++filt) with anonymous namespaces
removed, and --rename (plain text) and --rename-re (a Python regular expression) rename OLD's
kernels the way the change renamed them. Prints the kernels only one side has and those whose code differs; exit 1 if any.
"""
import argparse
import collections
import hashlib
import re
import subprocess
import sys


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return [n.replace("(anonymous namespace)::", "") for n in out]


def functions(path):
    text = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True,
                          check=True).stdout
    arch, name, body, found = None, None, [], []
    for line in text.splitlines():
        m = re.search(r"arch = (sm_\d+)", line)
        if m:
            if name:
                found.append((arch, name, body))
            arch, name, body = m.group(1), None, []
            continue
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            if name:
                found.append((arch, name, body))
            name, body = m.group(1), []
            continue
        if name is None:
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;?\s*(/\*.*)?$", line)
        if m and m.group(1):
            body.append(m.group(1))
    if name:
        found.append((arch, name, body))
    names = demangle([n for _, n, _ in found])
    table = {}
    for (arch, _, body), n in zip(found, names):
        table[(arch, n)] = hashlib.md5("\n".join(body).encode()).hexdigest()
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rename", action="append", default=[], help="old=new, applied to OLD's names")
    ap.add_argument("--rename-re", action="append", default=[], help="pattern=replacement (re.sub)")
    a = ap.parse_args()
    old, new = functions(a.old), functions(a.new)
    renames = [r.split("=", 1) for r in a.rename]
    patterns = [r.split("=", 1) for r in a.rename_re]
    moved = {}
    for (arch, n), h in old.items():
        for src, dst in renames:
            n = n.replace(src, dst)
        for src, dst in patterns:
            n = re.sub(src, dst, n)
        moved[(arch, n)] = h
    old = moved
    only_old = sorted(set(old) - set(new))
    only_new = sorted(set(new) - set(old))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])
    per_arch = collections.Counter(arch for arch, _ in set(old) & set(new))
    for label, keys in (("only in old", only_old), ("only in new", only_new), ("changed", changed)):
        for arch, n in keys:
            print(f"{label}: {arch} {n}")
    same = sum(per_arch.values()) - len(changed)
    print(f"{same} functions identical ({', '.join(f'{k}: {v}' for k, v in sorted(per_arch.items()))} "
          f"compared), {len(changed)} changed, {len(only_old)} only in old, {len(only_new)} only in new")
    return 1 if only_old or only_new or changed else 0


if __name__ == "__main__":
    sys.exit(main())
