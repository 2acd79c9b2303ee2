#!/usr/bin/env python3
"""depcheck.py -- finds files that call each other in a circle.

    tools/depcheck.py [--src SRC_DIR] BUILD_DIR

Calls go one way: a service's flows call its lower modules, which call
shared/; a lower file that must reach up does so through a callback.  This
checks it on the built objects, folder by folder: BUILD_DIR/obj/services/<svc>/
and BUILD_DIR/obj/shared/src/.  Within a folder, file A -> file B when A's
object uses (nm: U) a global symbol that B's object defines (T D B R C V W
and the like).  Every strongly connected component of two or more files is a
circle: it is printed with the edges and the symbols that form it.

With --src (the tree the objects were built from: `make lint` passes .),
an object whose source file is gone (a stale one, left in the build folder
by a file removed or renamed since) is left out, and said so.

Exit status: 0 no circle, 1 at least one, 2 usage or nm error (no objects
built: run `make all` first).
"""
import os
import subprocess
import sys


def read_symbols(obj):
    """Returns (defined, undefined) global symbol sets of one object."""
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in "Uwv":
            # U, and w/v: a weak reference not defined here
            undefined.add(name)
        elif kind in "TDBRCVWGSiu":
            # Upper case (and u/i: unique, indirect) is global; a lower-case
            # t/d/b/r is file-local (static) and cannot be called from outside.
            defined.add(name)
    return defined, undefined


def file_graph(objs):
    """Returns {file: {file: sorted symbols}} for the objects of one folder."""
    syms = {os.path.basename(o)[:-2] + ".c": read_symbols(o) for o in objs}
    owner = {}
    for f, (defined, _) in syms.items():
        for s in defined:
            owner.setdefault(s, f)
    graph = {f: {} for f in syms}
    for f, (_, undefined) in syms.items():
        for s in undefined:
            g = owner.get(s)
            if g is not None and g != f:
                graph[f].setdefault(g, []).append(s)
    for f in graph:
        for g in graph[f]:
            graph[f][g].sort()
    return graph


def sccs(graph):
    """Tarjan's strongly connected components, each a sorted list of files."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # The graphs are a few dozen files: recursion depth is no concern.
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def folders(build):
    """The object folders to check: (label, path), sorted; label is the
    source folder (services/agent, shared/src)."""
    out = []
    svc_root = os.path.join(build, "obj", "services")
    if os.path.isdir(svc_root):
        for svc in sorted(os.listdir(svc_root)):
            path = os.path.join(svc_root, svc)
            if os.path.isdir(path):
                out.append(("services/" + svc, path))
    shared = os.path.join(build, "obj", "shared", "src")
    if os.path.isdir(shared):
        out.append(("shared/src", shared))
    return out


def main(argv):
    args = argv[1:]
    src = None
    if len(args) == 3 and args[0] == "--src":
        src, args = args[1], args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: depcheck.py [--src SRC_DIR] BUILD_DIR", file=sys.stderr)
        return 2
    build = args[0]
    dirs = folders(build)
    if not dirs:
        print(f"depcheck: no objects under {build}/obj (run make all first)",
              file=sys.stderr)
        return 2
    cycles = 0
    for label, path in dirs:
        objs = []
        for f in sorted(os.listdir(path)):
            if not f.endswith(".o"):
                continue
            if src is not None and not os.path.isfile(
                    os.path.join(src, label, f[:-2] + ".c")):
                print(f"depcheck: left out {os.path.join(path, f)}: "
                      f"no {label}/{f[:-2]}.c (a stale object)")
                continue
            objs.append(os.path.join(path, f))
        try:
            graph = file_graph(objs)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"depcheck: nm failed in {path}: {e}", file=sys.stderr)
            return 2
        for comp in sccs(graph):
            if len(comp) < 2:
                continue
            cycles += 1
            print(f"{label}: circle of {len(comp)} files: {' '.join(comp)}")
            members = set(comp)
            for f in comp:
                for g in sorted(graph[f]):
                    if g in members:
                        print(f"    {f} -> {g}: {' '.join(graph[f][g])}")
    if cycles:
        print(f"depcheck: {cycles} circle(s) among files that call each other "
              "(calls go one way: flows -> lower modules -> shared/; "
              "a lower file reaches up through a callback)")
        return 1
    print(f"depcheck: no circle in {len(dirs)} folders")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
