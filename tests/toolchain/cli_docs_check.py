#!/usr/bin/env python3
"""Every command and flag a binary's --help shows is in its doc page.

usage: cli_docs_check.py BINARY DOC.md [BINARY DOC.md ...]

Walks `BINARY --help` and the --help of every subcommand it lists (CLI11's layout: an
"Options:" block and a "Subcommands:" block), and checks that DOC.md names every subcommand
(as "BINARY SUB ...", the way the docs write a command line) and every --flag. Prints each one
missing and exits 1; 0 when the doc names them all.
"""
import os
import re
import subprocess
import sys

FLAG = re.compile(r"(--[a-z0-9][a-z0-9-]*)")


def blocks(text):
    """{'Options': [lines], 'Subcommands': [lines]} of one --help text."""
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^(Options|Subcommands|Positionals):\s*$", line)
        if m:
            current = out.setdefault(m.group(1), [])
        elif not line.strip():
            current = None
        elif current is not None:
            current.append(line)
    return out


def walk(binary, path):
    """Yields (command path, flags) for the command and each subcommand below it."""
    text = subprocess.run([binary, *path, "--help"], capture_output=True, text=True,
                          check=False).stdout
    b = blocks(text)
    flags = set()
    for line in b.get("Options", []):
        head = line.strip().split("  ")[0]
        if not line.startswith("  -") and not line.startswith("  --"):
            continue
        flags.update(f for f in FLAG.findall(head) if f not in ("--help", "--version"))
    yield path, flags
    for line in b.get("Subcommands", []):
        m = re.match(r"^  ([a-z][a-z0-9-]*)\s", line)
        if m:
            yield from walk(binary, [*path, m.group(1)])


def main(argv):
    if len(argv) < 3 or len(argv) % 2 == 0:
        print(__doc__, file=sys.stderr)
        return 2
    missing = []
    for binary, doc in zip(argv[1::2], argv[2::2]):
        name = os.path.basename(binary)
        text = open(doc, encoding="utf-8").read()
        for path, flags in walk(binary, []):
            if path and f"{name} {' '.join(path)}" not in text:
                missing.append(f"{doc}: command `{name} {' '.join(path)}` is not named")
            for f in sorted(flags):
                if not re.search(re.escape(f) + r"(?![a-z0-9-])", text):
                    where = f"{name} {' '.join(path)}".strip()
                    missing.append(f"{doc}: flag {f} of `{where}` is not named")
    for m in missing:
        print(m)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
