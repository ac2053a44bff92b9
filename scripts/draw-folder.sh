#!/usr/bin/env python3
"""Draws one folder of the tree as floors of rooms, with its include arrows (docs/design.md §1
draws the folders; this draws the inside of one). python3 only, as check-layers.sh.

A room is a header with the sources of its stem (`flight_engine.h` + `flight_engine.cc`), or a
source alone; a source whose stem extends a header's (`blob_cache_read.cc` beside
`blob_cache.h`) is a room of its own that leans on it. An arrow A -> B: a file of room A
includes a file of room B (quoted or angle includes, resolved as check-layers.sh resolves them:
against the including file's folder, then the repository root). Rooms that reach no other room
stand on floor 0; every other room stands one floor above the highest room it reaches, so every
arrow points down. Rooms that reach each other (an include cycle between rooms, e.g. a header
that includes a part which includes the header back) cannot be put on floors: they share one,
and each arrow among them is printed as an arrow back up, with the file and line of its include.

Usage: scripts/draw-folder.sh FOLDER [ROOT]   (FOLDER relative to ROOT, e.g. core/cache;
                                               ROOT: the source tree, default this repository)
Prints the floors, top first, each room with its files' line counts and its arrows.
Exit 0: no arrow back up; 1: some (listed last); 2: bad usage or no such folder.
"""
import os
import re
import sys

SOURCE_EXTS = (".cc", ".cpp", ".cxx", ".c")
HEADER_EXTS = (".h", ".hpp", ".hh", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def rooms_of(files):
    """Maps each file name (in one folder) to its room's name: its stem."""
    return {f: os.path.splitext(f)[0] for f in files}


def includes(path):
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            m = INCLUDE.match(line)
            if m:
                out.append((n, m.group(1), m.group(2)))
    return out


def resolve(root, folder, kind, name):
    """The included file's path relative to root, or None when it is not a file of the tree."""
    tries = [os.path.join(folder, name)] if kind == '"' else []
    tries.append(name)
    for t in tries:
        p = os.path.normpath(t)
        if not p.startswith("..") and os.path.isfile(os.path.join(root, p)):
            return p
    return None


def strongly_connected(nodes, edges):
    """Tarjan's algorithm: a list of sets of nodes that reach each other."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def draw(root, folder):
    where = os.path.join(root, folder)
    files = sorted(f for f in os.listdir(where)
                   if f.endswith(SOURCE_EXTS + HEADER_EXTS) and os.path.isfile(os.path.join(where, f)))
    room = rooms_of(files)
    rooms = sorted(set(room.values()))
    members = {r: [f for f in files if room[f] == r] for r in rooms}
    lines = {f: sum(1 for _ in open(os.path.join(where, f), encoding="utf-8", errors="replace"))
             for f in files}
    edges = {r: set() for r in rooms}
    via = {}  # (from room, to room) -> "file:line"
    for f in files:
        for n, kind, name in includes(os.path.join(where, f)):
            p = resolve(root, folder, kind, name)
            if p is None or os.path.dirname(p) != os.path.normpath(folder):
                continue
            to = room.get(os.path.basename(p))
            if to is None or to == room[f]:
                continue
            edges[room[f]].add(to)
            via.setdefault((room[f], to), f"{folder}/{f}:{n}")
    comps = strongly_connected(rooms, edges)
    comp_of = {r: i for i, c in enumerate(comps) for r in c}
    floor = {}

    def floor_of(i):
        if i not in floor:
            below = {comp_of[w] for r in comps[i] for w in edges[r]} - {i}
            floor[i] = 1 + max((floor_of(j) for j in below), default=-1)
        return floor[i]

    for i in range(len(comps)):
        floor_of(i)
    back = sorted((a, b) for a in rooms for b in edges[a] if comp_of[a] == comp_of[b])
    top = max(floor.values(), default=0)
    print(f"{folder}: {len(rooms)} rooms on {top + 1} floors, "
          f"{sum(len(e) for e in edges.values())} arrows, {len(back)} back up")
    for fl in range(top, -1, -1):
        print(f"floor {fl}")
        for r in sorted(r for r in rooms if floor[comp_of[r]] == fl):
            size = " + ".join(f"{f} {lines[f]}" for f in members[r])
            down = sorted(w for w in edges[r] if comp_of[w] != comp_of[r])
            print(f"  {r:<28} ({size})")
            if down:
                print(f"  {'':<28}  -> {', '.join(down)}")
    for a, b in back:
        print(f"arrow back up: {a} -> {b} ({via[(a, b)]})")
    return 1 if back else 0


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) not in (2, 3) or argv[1].startswith("-"):
        print("usage: scripts/draw-folder.sh FOLDER [ROOT]", file=sys.stderr)
        return 2
    root = os.path.abspath(argv[2] if len(argv) == 3 else
                           os.path.join(os.path.dirname(__file__), ".."))
    folder = os.path.normpath(argv[1])
    if folder.startswith("..") or os.path.isabs(folder) or \
            not os.path.isdir(os.path.join(root, folder)):
        print(f"draw-folder: {argv[1]}: not a folder of {root}", file=sys.stderr)
        return 2
    return draw(root, folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
