#!/usr/bin/env python3
"""nccl_symbols.py - libnccl.so.2's exports against the contract.

usage: scripts/nccl_symbols.py LIB HEADER... [--imports-of SO]...

Checks that every host function declared in each HEADER (nccl.h: functions
returning ncclResult_t, const char * or void, named nccl*) and every nccl*
name that each SO (the torch wheel's libtorch_cuda.so) imports resolves in
LIB through dlsym, and so does its profiling alias pnccl*; and that LIB
exports nothing whose name does not start with nccl or pnccl. Prints one
summary line per source and every failure; exit status 1 on a failure.
"""
import ctypes
import re
import subprocess
import sys


def header_functions(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    names = re.findall(r"\b(?:ncclResult_t|const\s+char\s*\*|void)\s*\*?\s*"
                       r"(p?nccl[A-Za-z0-9_]*)\s*\(", text)
    return sorted({n[1:] if n.startswith("pnccl") else n for n in names})


def imports(path):
    out = subprocess.run(["nm", "-D", "--undefined-only", path],
                         capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[-1].split("@")[0] for line in out.splitlines()
                   if re.search(r"\bnccl\w*", line.split()[-1])
                   and line.split()[-1].startswith("nccl")})


def exports(path):
    out = subprocess.run(["nm", "-D", "--defined-only", path],
                         capture_output=True, text=True, check=True).stdout
    return sorted({line.split()[-1] for line in out.splitlines()})


def main():
    args = sys.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    lib_path, sources = args[0], []
    i = 1
    while i < len(args):
        if args[i] == "--imports-of":
            sources.append(("imports of " + args[i + 1], imports(args[i + 1])))
            i += 2
        else:
            sources.append((args[i], header_functions(args[i])))
            i += 1
    lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_LOCAL)
    bad = 0
    for what, names in sources:
        missing = []
        for name in names:
            for sym in (name, "p" + name):
                try:
                    getattr(lib, sym)
                except AttributeError:
                    missing.append(sym)
        print(f"{what}: {len(names)} functions, {len(missing)} missing "
              "(with their p aliases)")
        for sym in missing:
            print(f"  MISSING {sym}")
        bad += len(missing)
        if not names:
            print(f"  NO FUNCTIONS found in {what}")
            bad += 1
    stray = [s for s in exports(lib_path)
             if not re.match(r"p?nccl", s)]
    print(f"exports of {lib_path}: {len(exports(lib_path))}, "
          f"{len(stray)} outside nccl*/pnccl*")
    for s in stray:
        print(f"  STRAY {s}")
    return 1 if bad or stray else 0


if __name__ == "__main__":
    sys.exit(main())
