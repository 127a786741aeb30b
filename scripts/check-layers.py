#!/usr/bin/env python3
"""check-layers.py - the library's files call down the layers only.

usage: scripts/check-layers.py [OBJ_DIR]     (default build/obj, after make)

Reads every object file of the library (OBJ_DIR/lib/<folder>/*.o and
OBJ_DIR/transports/*.o) with nm, draws an edge A -> B where A uses a symbol
that B defines, and checks two things:
  - no circle of files (files that call each other, directly or not);
  - no file calls a file of a higher layer. The layers, bottom first, are the
    folders of docs/architecture.md:
      util -> boot -> topo -> fifo -> algo -> transports
        -> mem, observe, board -> exec -> cuda -> tune, coll -> comm
Prints each file's layer and every edge that breaks a rule; exit status 1 if
one does. make test runs it.
"""
import collections
import os
import subprocess
import sys

LAYERS = {"util": 0, "boot": 1, "topo": 2, "fifo": 3, "algo": 4,
          "transports": 5, "mem": 6, "observe": 6, "board": 6, "exec": 7,
          "cuda": 8, "tune": 9, "coll": 9, "comm": 10}


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        if f[1] == "U":
            used.add(f[0])
        elif f[1] in "TDBRVWG":
            defined.add(f[0])
    return defined, used


def folder(name):
    parts = name.split("/")
    return parts[1] if parts[0] == "lib" else parts[0]


def circles(edges, nodes):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "build/obj"
    objs = []
    for sub in ("lib", "transports"):
        for d, _, files in os.walk(os.path.join(root, sub)):
            objs += [os.path.join(d, f) for f in files if f.endswith(".o")]
    if not objs:
        sys.exit(f"check-layers: no library objects under {root} (run make)")
    defs, uses = {}, {}
    for o in sorted(objs):
        name = os.path.relpath(o, root)[:-2]
        if folder(name) not in LAYERS:
            sys.exit(f"check-layers: {name}: folder '{folder(name)}' has no "
                     "layer (add it to LAYERS and docs/architecture.md)")
        defs[name], uses[name] = symbols(o)
    owner = {s: f for f, ds in defs.items() for s in ds}
    edges = collections.defaultdict(set)
    why = collections.defaultdict(set)
    for f, us in uses.items():
        for s in us:
            g = owner.get(s)
            if g and g != f:
                edges[f].add(g)
                why[(f, g)].add(s)
    bad = 0
    for f in sorted(edges):
        for g in sorted(edges[f]):
            if LAYERS[folder(g)] > LAYERS[folder(f)]:
                bad += 1
                print(f"up: {f} ({folder(f)}) -> {g} ({folder(g)}): "
                      f"{', '.join(sorted(why[(f, g)])[:4])}")
    for comp in circles(edges, defs.keys()):
        bad += 1
        print(f"circle: {' -> '.join(comp)}")
    by_layer = collections.defaultdict(list)
    for f in defs:
        by_layer[LAYERS[folder(f)]].append(f)
    for layer in sorted(by_layer):
        print(f"{layer}: {' '.join(sorted(by_layer[layer]))}")
    print(f"check-layers: {len(defs)} files, "
          f"{sum(len(e) for e in edges.values())} edges, {bad} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
