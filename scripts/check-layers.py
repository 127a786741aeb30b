#!/usr/bin/env python3
"""check-layers.py - the library's files call down the layers only.

usage: scripts/check-layers.py [OBJ_DIR]     (default build/obj, after make)

Reads every object file of the library (OBJ_DIR/lib/<folder>/*.o and
OBJ_DIR/transports/*.o) with nm, draws an edge A -> B where A uses a symbol
that B defines, and checks two things:
  - no circle of files (files that call each other, directly or not);
  - no file calls a file of a higher layer.
Then it reads the compiler's dependency files next to them (*.d, written by
-MMD: every header a source file compiles against, directly or not), draws
an edge between folders where a source of one compiles against a header of
another, and checks two more, which the symbols cannot see (struct fields,
static inlines, macros, function pointers):
  - no source compiles against a header of a higher layer;
  - no circle of folders.
The layers, bottom first, are the folders of docs/architecture.md:
      util -> boot -> topo -> fifo -> algo -> transports
        -> mem, observe, board -> exec -> cuda -> tune, coll -> comm
Prints each file's layer and every edge that breaks a rule (an include with
the source and header behind it); exit status 1 if one does. make test runs
it.
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


def dep_sources(path):
    """The source and the headers of a -MMD dependency file's first rule."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    rule = text.split("\n", 1)[0]
    if ":" not in rule:
        return None, []
    deps = rule.split(":", 1)[1].split()
    return (deps[0], deps[1:]) if deps else (None, [])


def lib_folder(path):
    """The layer folder of a library path (lib/<folder>/x, transports/x),
    or None for anything else (include/, system headers)."""
    parts = os.path.normpath(path).split(os.sep)
    if len(parts) == 3 and parts[0] == "lib":
        return parts[1]
    if len(parts) == 2 and parts[0] == "transports":
        return "transports"
    return None


def includes(root):
    """Folder include edges from the .d files: {(a, b): [(source, header)]},
    and how many sources were read."""
    edges = collections.defaultdict(list)
    nsrc = 0
    for sub in ("lib", "transports"):
        for d, _, files in os.walk(os.path.join(root, sub)):
            for f in sorted(files):
                if not f.endswith(".d"):
                    continue
                src, headers = dep_sources(os.path.join(d, f))
                a = lib_folder(src) if src else None
                if a is None or not os.path.exists(src):
                    continue  # a source moved away since that build
                nsrc += 1
                for h in headers:
                    b = lib_folder(h)
                    if b is not None and b != a:
                        edges[(a, b)].append((src, h))
    return edges, nsrc


def check_includes(root):
    """Prints upward includes and folder circles; returns how many."""
    edges, nsrc = includes(root)
    bad = 0
    graph = collections.defaultdict(set)
    folders = set()
    for (a, b), why in sorted(edges.items()):
        for f in (a, b):
            if f not in LAYERS:
                sys.exit(f"check-layers: folder '{f}' has no layer (add it "
                         "to LAYERS and docs/architecture.md)")
        graph[a].add(b)
        folders |= {a, b}
        if LAYERS[b] > LAYERS[a]:
            bad += 1
            src, h = why[0]
            more = f" and {len(why) - 1} more" if len(why) > 1 else ""
            print(f"up-include: {a} ({LAYERS[a]}) -> {b} ({LAYERS[b]}): "
                  f"{src} compiles against {h}{more}")
    for comp in circles(graph, folders):
        bad += 1
        print(f"folder circle: {' -> '.join(comp)}")
    print(f"includes: {nsrc} sources, {len(folders)} folders, "
          f"{len(edges)} folder edges, {bad} broken")
    return bad, nsrc


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
    inc_bad, nsrc = check_includes(root)
    if nsrc == 0:
        sys.exit(f"check-layers: no dependency files (*.d) under {root} "
                 "(build with make: it compiles with -MMD)")
    print(f"check-layers: {len(defs)} files, "
          f"{sum(len(e) for e in edges.values())} edges, {bad} broken; "
          f"folder includes: {inc_bad} broken")
    return 1 if bad or inc_bad else 0


if __name__ == "__main__":
    sys.exit(main())
