#!/usr/bin/env python3
"""The layering check of docs/design.md §1 (python3, which every build machine has; no other
dependency). It reads the layer table in docs/design.md (the block under "**Dependencies.**")
and the tree's CMake files, and fails (exit 1), naming what is at fault, when
  - the table is inconsistent: a row names a target no row defines, or one of a higher
    layer, or rows name each other in a cycle;
  - a CMake link list (`modelfs_library(... DEPS ...)`, `target_link_libraries`) of a
    production target differs from its row (either way), or a production target has no row;
  - an `#include "..."` or `#include <...>` of a .h .hpp .hh .cc .cpp .cxx .c or .inc file
    names a file of the tree that belongs to a target its own target's row does not name
    (nor is it the same target, nor a header the row lists as an explicit edge);
  - a source file belongs to no row, or a header to no target.
Exit 0: the tree keeps to the table; exit 2: bad usage or a table it cannot read.
Usage: scripts/check-layers.sh [ROOT]   (ROOT: the source tree, default: this repository)

Which target a file belongs to: the target whose SOURCES (or add_executable/target_sources
list) name it; a header (or .inc) without a source of its own belongs to the target of the
source with its stem in its folder (model_tree.h -> model_tree.cc), else to the row that says
it owns it (`(owns fuse/mount_options.h)`), else to the only target whose row has its folder.
Files under a folder row (`*`: tests/, integration/, bench/, testsupport/) belong to it.
An include is resolved as the compiler does with the repository root as the include root:
"x" against the including file's folder, then ROOT; <x> against ROOT. One that names no file
of the tree (abseil, libfuse, generated protos) is not ours to check.
"""
import os
import re
import sys

SOURCE_EXTS = (".h", ".hpp", ".hh", ".inc", ".cc", ".cpp", ".cxx", ".c")
HEADER_EXTS = (".h", ".hpp", ".hh", ".inc")
# Top-level folders with no C++ of ours (and build trees, "build*"), never scanned; nor, at any
# depth, hidden folders and npm's.
SKIP_TOP = {"third_party", "packaging", "systemd", "docs", "cmake", "scripts"}
TABLE_START = "**Dependencies.**"

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
DOTS = re.compile(r"^\.+$")


class TableError(Exception):
    pass


def full_name(short):
    """Table names are CMake targets without the modelfs_ prefix; the binaries keep theirs."""
    return short if short.startswith("modelfs") else "modelfs_" + short


class Row:
    def __init__(self, line, layer, folder, target):
        self.line = line  # of docs/design.md
        self.layer = layer
        self.folder = folder  # "core/oci", "snapshotter/model", "tests"
        self.target = target  # full CMake name, or "*" for a folder row
        self.deps = []  # full target names; "testsupport/" for a folder; "production"
        self.headers = []  # explicit header edges
        self.owns = []  # headers of this target no source names

    def name(self):
        return self.folder + "/" if self.target == "*" else self.target


def parse_table(text, top_dirs):
    """The rows of the code block after TABLE_START. Grammar of a line:
       [LAYER] [FOLDER/ [SUBFOLDER/]] TARGET [.....] DEP DEP ... [third party]
       (+ [header|headers] DEP-OR-HEADER ...[: why])   (owns HEADER ...)
    `-` alone: no dependency; `*` for TARGET: the whole folder."""
    lines = text.split("\n")
    try:
        at = next(i for i, l in enumerate(lines) if l.startswith(TABLE_START))
        start = next(i for i in range(at, len(lines)) if lines[i].startswith("```"))
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    except StopIteration:
        raise TableError(f"no code block after '{TABLE_START}' in docs/design.md §1")
    rows = []
    layer, top, sub, pending = None, None, None, None
    for i in range(start + 1, end):
        number = i + 1
        stripped = re.sub(r"\[[^\]]*\]", " ", lines[i]).strip()  # [third-party libraries]
        if not stripped or (i == start + 1 and stripped.startswith("layer ")):
            continue  # the heading line
        # A group "(+ ...)" may run over lines: join them until it closes.
        if pending is not None:
            pending += " " + stripped
            if ")" not in stripped:
                continue
            stripped, pending = pending, None
        elif stripped.count("(") > stripped.count(")"):
            pending = stripped
            continue
        # Parenthesized groups: (+ more names or headers), (owns headers), or a comment.
        groups = re.findall(r"\(([^)]*)\)", stripped)
        stripped = re.sub(r"\([^)]*\)", " ", stripped).strip()
        if stripped:
            words = stripped.split()
            if words[0].isdigit():
                layer = int(words.pop(0))
            while words and "/" in words[0]:
                w = words.pop(0).rstrip("/")
                if w.split("/")[0] in top_dirs:
                    top, sub = w, None
                else:
                    sub = w
            if layer is None or top is None or not words:
                raise TableError(f"design.md:{number}: a row needs a layer, a folder and a "
                                 f"target")
            target = words.pop(0)
            row = Row(number, layer, top + ("/" + sub if sub else ""),
                      target if target == "*" else full_name(target))
            if words and DOTS.match(words[0]):
                words.pop(0)
            for w in words:
                if w == "-":
                    continue
                if w == "production" or w.endswith("/"):
                    row.deps.append(w)
                elif not re.match(r"^[A-Za-z0-9_-]+$", w):
                    raise TableError(f"design.md:{number}: '{w}' is not a target name")
                else:
                    row.deps.append(full_name(w))
            rows.append(row)
        for group in groups:
            words = group.split(":", 1)[0].replace(",", " ").split()
            if not words or words[0] not in ("+", "owns"):
                continue  # a comment
            if not rows:
                raise TableError(f"design.md:{number}: ({words[0]} ...) before any row")
            row = rows[-1]
            if words[0] == "owns":
                row.owns += words[1:]
                continue
            for w in words[1:]:
                if w in ("header", "headers"):
                    continue
                if w.endswith(HEADER_EXTS):
                    row.headers.append(w)
                else:
                    row.deps.append(full_name(w))
    if pending is not None:
        raise TableError(f"design.md: an unclosed ( in the layer table")
    if not rows:
        raise TableError("the layer table in docs/design.md has no rows")
    return rows


# ---- CMake ---------------------------------------------------------------------------------
COMMANDS = ("modelfs_library", "add_library", "add_executable", "target_sources",
            "target_link_libraries")
KEYWORDS = {"PRIVATE", "PUBLIC", "INTERFACE", "STATIC", "SHARED", "OBJECT", "SOURCES", "DEPS"}


def cmake_calls(text):
    text = re.sub(r"#[^\n]*", "", text)
    for m in re.finditer(r"\b(" + "|".join(COMMANDS) + r")\s*\(", text):
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        args = text[m.end():j - 1].split()
        if args:
            yield m.group(1), args[0], args[1:], text.count("\n", 0, m.start()) + 1


class Target:
    def __init__(self, name, where):
        self.name = name
        self.where = where  # "core/oci/CMakeLists.txt:5"
        self.sources = set()  # paths relative to ROOT
        self.deps = {}  # name -> where it is linked


def parse_cmake(root, cmake_files):
    targets = {}
    for path in cmake_files:
        with open(os.path.join(root, path)) as f:
            text = f.read()
        base = os.path.dirname(path)
        for command, name, args, line in cmake_calls(text):
            where = f"{path}:{line}"
            if command in ("modelfs_library", "add_library", "add_executable"):
                targets.setdefault(name, Target(name, where))
            t = targets.get(name)
            if t is None:
                continue
            section = "SOURCES" if command != "target_link_libraries" else "DEPS"
            for a in args:
                if a in ("SOURCES", "DEPS"):
                    section = a
                    continue
                if a in KEYWORDS or "$" in a or '"' in a:
                    continue
                if section == "SOURCES":
                    t.sources.add(os.path.normpath(os.path.join(base, a)))
                else:
                    t.deps.setdefault(a, where)
    return targets


# ---- The check -----------------------------------------------------------------------------
def walk(root):
    sources, cmake_files = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        top = rel_dir == "."
        dirnames[:] = sorted(
            d for d in dirnames
            if not d.startswith(".") and d != "node_modules"
            and not (top and (d in SKIP_TOP or d.startswith("build"))))
        for name in sorted(filenames):
            path = os.path.normpath(os.path.join(rel_dir, name))
            if name.endswith(SOURCE_EXTS):
                sources.append(path)
            elif name == "CMakeLists.txt" or name.endswith(".cmake"):
                cmake_files.append(path)
    return sources, cmake_files


def in_folder(path, folder):
    return path.startswith(folder + "/")


def check(root):
    """Returns (errors, number of includes checked); raises TableError."""
    top_dirs = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}
    with open(os.path.join(root, "docs", "design.md")) as f:
        rows = parse_table(f.read(), top_dirs)
    sources, cmake_files = walk(root)
    targets = parse_cmake(root, cmake_files)
    errors = []
    by_target = {}
    for r in rows:
        if r.target != "*":
            if r.target in by_target:
                errors.append(f"design.md:{r.line}: {r.target} has two rows")
            by_target[r.target] = r
    folder_rows = [r for r in rows if r.target == "*"]

    # 1. The table itself: every name defined, nothing upward, no cycle.
    for r in rows:
        for d in r.deps:
            if d == "production":
                continue
            if d.endswith("/"):
                other = next((o for o in folder_rows if o.folder == d.rstrip("/")), None)
            else:
                other = by_target.get(d)
            if other is None:
                errors.append(f"design.md:{r.line}: {r.name()} names {d}, which has no row")
            elif other.layer > r.layer:
                errors.append(f"design.md:{r.line}: {r.name()} (layer {r.layer}) names "
                              f"{other.name()} (layer {other.layer}): up a layer")
        for h in r.headers + r.owns:
            if not os.path.isfile(os.path.join(root, h)):
                errors.append(f"design.md:{r.line}: {r.name()} names {h}, which does not exist")
    state = {}

    def visit(name, stack):
        state[name] = 1
        for d in by_target[name].deps:
            if d not in by_target:
                continue
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                errors.append(f"design.md:{by_target[d].line}: a cycle in the table: "
                              + " -> ".join(cycle))
            elif d not in state:
                visit(d, stack + [d])
        state[name] = 2

    for name in sorted(by_target):
        if name not in state:
            visit(name, [name])

    # 2. CMake against the table: a production target's links are its row's, both ways.
    defined_in_tree = set(targets)
    target_folders = {r.folder for r in rows if r.target != "*"}
    for name in sorted(targets):
        t = targets[name]
        folder = os.path.dirname(t.where.split(":")[0])
        if name not in by_target and not any(folder == f or in_folder(folder, f)
                                             for f in target_folders):
            continue  # tests, harness and bench targets: their folder rows hold them
        r = by_target.get(name)
        if r is None:
            errors.append(f"{t.where}: {name}: a production target with no row in the layer "
                          f"table of docs/design.md")
            continue
        for src in sorted(t.sources):
            if not in_folder(src, r.folder):
                errors.append(f"{t.where}: {name} builds {src}, outside its row's folder "
                              f"{r.folder} (design.md:{r.line})")
        linked = {d for d in t.deps if d in defined_in_tree}
        listed = {d for d in r.deps if d in by_target}
        for d in sorted(linked - listed):
            errors.append(f"{t.deps[d]}: {name} links {d}, which its row "
                          f"(design.md:{r.line}) does not name")
        for d in sorted(listed - linked):
            errors.append(f"design.md:{r.line}: {name}'s row names {d}, which {t.where} "
                          f"does not link")
    for name in sorted(by_target):
        if name not in targets:
            errors.append(f"design.md:{by_target[name].line}: {name} is no CMake target of "
                          f"the tree")

    # 3. Which row each file belongs to.
    owner_of_source = {}
    for t in targets.values():
        if t.name in by_target:
            for s in t.sources:
                owner_of_source[s] = t.name
    owned = {h: r.target for r in rows for h in r.owns}
    source_set = set(sources)

    def owner(path):
        """The row (a Row) a file belongs to, or an error string."""
        for r in folder_rows:
            if in_folder(path, r.folder):
                return r
        if path in owner_of_source:
            return by_target[owner_of_source[path]]
        if path.endswith(HEADER_EXTS):
            stem = os.path.splitext(path)[0]
            for ext in (".cc", ".cpp", ".cxx", ".c"):
                if stem + ext in owner_of_source:
                    return by_target[owner_of_source[stem + ext]]
            if path in owned:
                return by_target[owned[path]]
            candidates = [r for r in rows if r.target != "*"
                          and os.path.dirname(path) == r.folder]
            if len(candidates) == 1:
                return candidates[0]
            if candidates:
                return (f"a header of {os.path.dirname(path)}, which holds "
                        f"{', '.join(c.target for c in candidates)}: name it in its row's "
                        f"(owns ...)")
        if any(in_folder(path, r.folder) or os.path.dirname(path) == r.folder for r in rows):
            return "in no target's source list"
        return "in no folder of the layer table in docs/design.md"

    owners = {}
    for path in sources:
        o = owner(path)
        if isinstance(o, str):
            errors.append(f"{path}: {o}")
        else:
            owners[path] = o

    # 4. The includes.
    def allowed(own, target_row, target_path):
        if target_row is own:
            return True
        if target_path in own.headers:
            return True
        if target_row.target == "*":
            return target_row.folder + "/" in own.deps
        if "production" in own.deps:
            return True
        return target_row.target in own.deps

    checked = 0
    for path in sources:
        own = owners.get(path)
        if own is None:
            continue
        with open(os.path.join(root, path), errors="replace") as f:
            lines = f.readlines()
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = m.group(2)
            candidates = [os.path.normpath(os.path.join(os.path.dirname(path), name))] \
                if m.group(1) == '"' else []
            candidates.append(os.path.normpath(name))
            target = next((c for c in candidates if c in source_set), None)
            if target is None:
                continue  # not ours: abseil, nlohmann, libfuse, generated protos
            checked += 1
            other = owners.get(target)
            if other is None or allowed(own, other, target):
                continue
            if other.layer > own.layer:
                why = f"upward into {other.name()} (layer {other.layer})"
            else:
                why = f"{other.name()} (layer {other.layer}), which its row does not name"
            errors.append(f"{path}:{number}: {name}: {own.name()} (layer {own.layer}, "
                          f"design.md:{own.line}) includes {why}")
    return errors, checked


def main(argv):
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print("usage: scripts/check-layers.sh [ROOT]\n" + __doc__)
        return 0
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print("usage: scripts/check-layers.sh [ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..")
    if not os.path.isfile(os.path.join(root, "docs", "design.md")):
        print(f"check-layers: {root}: no docs/design.md", file=sys.stderr)
        return 2
    try:
        errors, checked = check(os.path.abspath(root))
    except TableError as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    for e in errors:
        print(f"check-layers: {e}", file=sys.stderr)
    if errors:
        print(f"check-layers: {len(errors)} violation(s) of the layers of docs/design.md §1",
              file=sys.stderr)
        return 1
    print(f"check-layers: {checked} includes and the CMake link lists keep to the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
