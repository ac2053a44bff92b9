#!/usr/bin/env python3
# The layering check of docs/design.md §1 (written in python3, which every build machine has; no
# other dependency). Reads every `#include "..."` in the tree's .h and .cc files and fails (exit
# 1) on an include that goes up a layer or to a folder its row does not name, printing
# file:line and the rule. Exit 0: every include keeps to the table; exit 2: bad usage.
# Usage: scripts/check-layers.sh [ROOT]   (ROOT: the source tree, default: this repository)
#
# An include is resolved against ROOT (`core/oci/digest.h`), else against the including file's
# folder; one that names no file in the tree (abseil, generated protos) is not ours to check.
# A file belongs to the row with the longest folder that contains it; a .h/.cc file under no
# row fails (add a row). Rows whose folder does not exist yet are ignored.
import fnmatch
import os
import re
import sys

# ---- The table: folder, layer, the folders it may include besides itself. -----------------
# Layers as docs/design.md §1 numbers them. An entry may be a folder ("core/oci"), a pattern
# ("core/*") or one header ("core/cache/blob_reader.h", an explicit allowed edge with its
# reason). Nothing may name a folder of a higher layer; the check refuses such a table.
PRODUCTION = ["core/*", "fuse", "proto", "host", "snapshotter", "snapshotter/*", "cmd/*"]
RULES = [
    ("core/status", 0, []),
    ("core/text", 0, ["core/status"]),
    ("core/base", 0, ["core/status", "core/text"]),
    ("core/sqlite", 0, ["core/status"]),
    ("core/http", 1, ["core/status", "core/base", "core/text"]),
    ("core/io", 1, ["core/http", "core/status", "core/base", "core/text"]),
    ("core/formats", 2, ["core/io", "core/text", "core/status"]),
    ("core/oci", 2, ["core/io", "core/text", "core/status", "core/base"]),
    ("core/cache", 3, ["core/oci", "core/io", "core/sqlite", "core/base", "core/text",
                       "core/status"]),
    ("core/registry", 3, ["core/oci", "core/io", "core/http", "core/base", "core/text",
                          "core/status",
                          # RegistryBlobSource implements the cache's network seam, an
                          # interface with no code that includes only core/oci/digest.h, so the
                          # registry implements it without linking the cache (design.md §1).
                          "core/cache/remote_blob_source.h"]),
    ("core/hub", 3, ["core/formats", "core/oci", "core/io", "core/http", "core/base",
                     "core/text", "core/status"]),
    ("core/trust", 4, ["core/registry", "core/oci", "core/base", "core/text", "core/status"]),
    ("core/publish", 5, ["core/registry", "core/hub", "core/formats", "core/oci", "core/io",
                         "core/base", "core/text", "core/status",
                         "core/resolve"]),
    # Resolution (ResolveModel, its fetchers and clients): below core/model and core/publish,
    # above the registry, the OCI code and the cache.
    ("core/resolve", 4, ["core/registry", "core/oci", "core/cache", "core/formats", "core/io",
                         "core/http", "core/base", "core/text", "core/status"]),
    # Equivalence attestations: the comparison (formats), the statement, its DSSE envelope and
    # cosign's .att tag (trust, registry); beside core/model and core/publish.
    ("core/attest", 5, ["core/trust", "core/registry", "core/formats", "core/oci", "core/io",
                        "core/base", "core/text", "core/status"]),
    ("core/model", 5, ["core/resolve", "core/cache", "core/registry", "core/formats",
                       "core/oci", "core/io", "core/base", "core/text", "core/status"]),
    ("fuse", 6, ["core/oci", "core/base", "core/text", "core/status",
                 # ModelTree's header-only seams: the filesystem sees the cache through the
                 # BlobReader interface and a model's files as TreeFile values, and links
                 # neither library (design.md §1, "Two seams").
                 "core/cache/blob_reader.h", "core/model/tree_file.h"]),
    ("proto", 6, []),
    # The model host: above fuse/ and core/model, below snapshotter/ and cmd/.
    ("host", 7, ["fuse", "core/*", "proto"]),
    ("snapshotter", 8, ["host", "fuse", "proto", "core/*", "snapshotter/*"]),
    # snapshotter/, one subfolder per target.
    ("snapshotter/store", 8, ["core/*"]),
    ("snapshotter/service", 8, ["snapshotter/store", "proto", "core/*"]),
    ("snapshotter/content", 8, ["proto", "core/*"]),
    ("snapshotter/policy", 8, ["core/*"]),
    ("snapshotter/model", 8, ["snapshotter/store", "snapshotter/content", "snapshotter/policy",
                              "host", "fuse", "proto", "core/*"]),
    # The admin service over NodeAdmin (snapshotter/model/node_status.h, an interface with
    # plain values) and containerd's ToGrpcStatus.
    ("snapshotter/admin", 8, ["snapshotter/model/node_status.h", "snapshotter/service",
                              "snapshotter/store", "proto", "core/*"]),
    ("cmd/modelfs", 9, ["host", "fuse", "core/*",
                        # `modelfs node` reads the daemon's config to find its admin socket.
                        "cmd/modelfs-snapshotter/daemon_config.h"]),
    ("cmd/modelfs-snapshotter", 9, ["snapshotter", "snapshotter/*", "host", "fuse", "proto",
                                    "core/*"]),
    # Test and bench code: one support leaf, imported by the three folders above it, which
    # never import each other.
    ("testsupport", 10, PRODUCTION),
    ("tests", 11, PRODUCTION + ["testsupport"]),
    ("integration", 11, PRODUCTION + ["testsupport"]),
    ("bench", 11, PRODUCTION + ["testsupport"]),
]
# Folders with no C++ of ours, never scanned.
SKIP_DIRS = {".git", "node_modules", "third_party", "packaging", "systemd", "docs"}
# ---------------------------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def row_of(path, rows):
    best = None
    for row in rows:
        if path == row[0] or path.startswith(row[0] + "/"):
            if best is None or len(row[0]) > len(best[0]):
                best = row
    return best


def allows(entry, target_path, target_folder):
    if entry.endswith((".h", ".cc")):
        return target_path == entry
    return fnmatch.fnmatchcase(target_folder, entry)


def layer_of_entry(entry, rows):
    for row in rows:
        if not entry.endswith((".h", ".cc")) and fnmatch.fnmatchcase(row[0], entry):
            yield row


def check_table(rows):
    errors = []
    for folder, layer, allowed in rows:
        for entry in allowed:
            if entry.endswith((".h", ".cc")):
                continue  # an explicit edge: its reason is beside it
            for other in layer_of_entry(entry, rows):
                if other[1] > layer:
                    errors.append(f"table: {folder} (layer {layer}) allows {entry}, which "
                                  f"matches {other[0]} (layer {other[1]}): up a layer")
    return errors


def scan(root):
    rows = RULES
    errors = check_table(rows)
    checked = 0
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith(("build", ".")))
        for name in sorted(filenames):
            if not name.endswith((".h", ".cc")):
                continue
            path = os.path.normpath(os.path.join(rel_dir, name))
            own = row_of(path, rows)
            if own is None:
                errors.append(f"{path}: in no row of the table in scripts/check-layers.sh")
                continue
            with open(os.path.join(root, path), errors="replace") as f:
                lines = f.readlines()
            for number, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = os.path.normpath(m.group(1))
                if not os.path.isfile(os.path.join(root, target)):
                    local = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
                    if not os.path.isfile(os.path.join(root, local)):
                        continue  # not ours: abseil, nlohmann, generated protos
                    target = local
                checked += 1
                other = row_of(target, rows)
                if other is None or other[0] == own[0]:
                    continue
                target_folder = other[0]
                if any(allows(e, target, target_folder) for e in own[2]):
                    continue
                if other[1] > own[1]:
                    why = (f"{own[0]} (layer {own[1]}) includes upward into {target_folder} "
                           f"(layer {other[1]})")
                else:
                    why = (f"{own[0]} (layer {own[1]}) may not include {target_folder} "
                           f"(layer {other[1]}): not in its row")
                errors.append(f"{path}:{number}: {m.group(1)}: {why}")
    return errors, checked


def main(argv):
    if len(argv) > 2:
        print("usage: scripts/check-layers.sh [ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(__file__), "..")
    if not os.path.isdir(root):
        print(f"check-layers: {root}: not a directory", file=sys.stderr)
        return 2
    errors, checked = scan(os.path.abspath(root))
    for e in errors:
        print(f"check-layers: {e}", file=sys.stderr)
    if errors:
        print(f"check-layers: {len(errors)} include(s) break the layers of docs/design.md §1",
              file=sys.stderr)
        return 1
    print(f"check-layers: {checked} includes keep to the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
