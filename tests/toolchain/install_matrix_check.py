#!/usr/bin/env python3
"""docs/install.md's tested matrix against the CTest entries that run it.

The table under "### Tested matrix" has one row per feature: a `tests` cell naming gtest patterns
as `binary:Pattern` (several separated by ", "), then one cell per containerd version ("1.6",
"2.1.4", ...), each "yes" or "no". A version's cell must say "yes" exactly when every test the
row's patterns match runs on that version, and "no" when none does; a row some but not all of
whose tests run on a version is an error too. A test runs on a version when a CTest entry
labelled containerd-<version> runs its binary with a gtest filter that selects it (CMake:
modelfs_e2e_test(... CONTAINERD_RELEASES ...) and LABELS ... containerd-1.6).

Usage: install_matrix_check.py --ctest CTEST --build BUILD_DIR --doc docs/install.md [--self-test]
With --self-test it also checks that flipping one cell of the table is reported (so the check
cannot pass by reading nothing). Exits 1 naming each disagreement.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys

HEADING = "### Tested matrix"


def parse_table(doc_text):
    """Returns (versions, rows): rows are (line number, feature, [(binary, pattern)], {v: bool})."""
    lines = doc_text.split("\n")
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == HEADING)
    except StopIteration:
        raise SystemExit(f"no '{HEADING}' heading in the document")
    i = start + 1
    while i < len(lines) and not lines[i].startswith("|"):
        i += 1
    if i >= len(lines):
        raise SystemExit(f"no table under '{HEADING}'")
    header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
    if header[:2] != ["feature", "tests"] or len(header) < 3:
        raise SystemExit(f"line {i + 1}: the table's header must be | feature | tests | <versions> |")
    versions = header[2:]
    rows = []
    i += 2  # the |---| line
    while i < len(lines) and lines[i].startswith("|"):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        if len(cells) != len(header):
            raise SystemExit(f"line {i + 1}: {len(cells)} cells, the header has {len(header)}")
        tests = []
        for t in cells[1].split(","):
            t = t.strip().strip("`")
            if ":" not in t:
                raise SystemExit(f"line {i + 1}: test '{t}' is not binary:Pattern")
            binary, pattern = t.split(":", 1)
            tests.append((binary, pattern))
        marks = {}
        for v, cell in zip(versions, cells[2:]):
            if cell not in ("yes", "no"):
                raise SystemExit(f"line {i + 1}: cell for {v} is '{cell}', want yes or no")
            marks[v] = cell == "yes"
        rows.append((i + 1, cells[0], tests, marks))
        i += 1
    return versions, rows


def gtest_selects(flt, name):
    """Whether the gtest filter `flt` (positive[-negative], ':'-separated globs) selects `name`."""
    pos, _, neg = flt.partition("-")
    pos_globs = [p for p in pos.split(":") if p] or ["*"]
    neg_globs = [p for p in neg.split(":") if p]
    return any(fnmatch.fnmatchcase(name, g) for g in pos_globs) and not any(
        fnmatch.fnmatchcase(name, g) for g in neg_globs)


def list_tests(binary_path):
    out = subprocess.run([binary_path, "--gtest_list_tests"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    names, suite = [], ""
    for line in out.split("\n"):
        if not line.strip() or line.startswith("modelfs-test"):
            continue
        if not line.startswith(" "):
            suite = line.split("#")[0].strip()
        else:
            names.append(suite + line.split("#")[0].strip())
    return names


def ctest_entries(ctest, build):
    """CTest entries labelled containerd-*: (name, version, binary name, binary path, filter)."""
    out = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    entries = []
    for t in json.loads(out)["tests"]:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        labels = props.get("LABELS", [])
        versions = [l[len("containerd-"):] for l in labels if l.startswith("containerd-")]
        if not versions or props.get("DISABLED"):
            continue
        command = t.get("command", [])
        flt = "*"
        for arg in command[1:]:
            if arg.startswith("--gtest_filter="):
                flt = arg[len("--gtest_filter="):]
        for v in versions:
            entries.append((t["name"], v, os.path.basename(command[0]), command[0], flt))
    return entries


def check(versions, rows, entries, tests_of):
    errors = []
    entry_versions = {e[1] for e in entries}
    for v in sorted(entry_versions - set(versions)):
        errors.append(f"CTest runs tests on containerd {v}, which the table has no column for")
    for line, feature, tests, marks in rows:
        for binary, pattern in tests:
            if binary not in tests_of:
                errors.append(f"line {line} ({feature}): no CTest entry runs the binary {binary}")
                continue
            matched = [n for n in tests_of[binary] if fnmatch.fnmatchcase(n, pattern)]
            if not matched:
                errors.append(f"line {line} ({feature}): {binary}:{pattern} matches no test")
                continue
            for v in versions:
                runs = [n for n in matched if any(
                    e[1] == v and e[2] == binary and gtest_selects(e[4], n) for e in entries)]
                if runs and len(runs) != len(matched):
                    missing = sorted(set(matched) - set(runs))
                    errors.append(f"line {line} ({feature}): on {v} only some tests of "
                                  f"{binary}:{pattern} run; not {', '.join(missing)}")
                elif bool(runs) != marks[v]:
                    errors.append(f"line {line} ({feature}): the table says {'yes' if marks[v] else 'no'}"
                                  f" for {v}, CTest {'runs' if runs else 'does not run'} "
                                  f"{binary}:{pattern} there")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctest", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    with open(args.doc, encoding="utf-8") as f:
        text = f.read()
    versions, rows = parse_table(text)
    entries = ctest_entries(args.ctest, args.build)
    tests_of = {}
    for _, _, binary, path, _ in entries:
        if binary not in tests_of:
            tests_of[binary] = list_tests(path)
    errors = check(versions, rows, entries, tests_of)
    for e in errors:
        print(f"{args.doc}: {e}")
    if errors:
        return 1
    print(f"{args.doc}: {len(rows)} rows x {len(versions)} containerd versions agree with "
          f"{len({e[0] for e in entries})} CTest entries")
    if args.self_test:
        line, feature, tests, marks = rows[0]
        flipped = dict(marks)
        flipped[versions[0]] = not marks[versions[0]]
        bad = check(versions, [(line, feature, tests, flipped)] + rows[1:], entries, tests_of)
        if not bad:
            print("self-test: flipping a cell went unnoticed")
            return 1
        print(f"self-test: a flipped cell is reported: {bad[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
