#!/usr/bin/env python3
"""Clang's thread-safety analysis over every project translation unit.

Reads compile_commands.json from a configured build directory (`make
thread-safety` uses a clang configuration in build-clang/ where only the
generated headers are built; GCC commands work too) and runs `clang++ -fsyntax-only` on each of the project's own .cc
files (not generated protobuf code, not third-party code) with only the
thread-safety warnings enabled, as errors. Nothing is linked or written.

  scripts/check-thread-safety.py [BUILD_DIR] [--jobs N] [--clang CLANG++]

Exit status 0 when every file is clean, 1 when the analysis reports
something (the diagnostics are printed), 2 on a usage error.
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import time

SOURCE_DIRS = ("lib", "server", "client", "tools", "proto", "tests",
               "bench", "examples", "cmake")
# GCC options clang does not know, and options that would turn other
# warnings into errors or write output.
DROP = {"-Werror", "-Wno-error=tsan", "-fno-sanitize-recover=undefined"}
DROP_WITH_VALUE = {"-o", "-MF", "-MT", "-MQ"}
CHECK_FLAGS = ["-fsyntax-only", "-Wno-everything", "-Wthread-safety",
               "-Werror=thread-safety", "-Wno-unknown-warning-option"]


def project_root():
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command_for(entry, clang):
    args = entry.get("arguments") or shlex.split(entry["command"])
    out = [clang]
    skip = False
    for arg in args[1:]:
        if skip:
            skip = False
            continue
        if arg in DROP_WITH_VALUE:
            skip = True
            continue
        if arg in DROP or arg in ("-c", "-MD", "-MMD"):
            continue
        if arg.startswith("-fsanitize"):
            continue
        out.append(arg)
    return out + CHECK_FLAGS


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", default="build-clang")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--clang", default=os.environ.get("CLANGXX", "clang++"))
    args = parser.parse_args()

    root = project_root()
    db_path = os.path.join(args.build_dir, "compile_commands.json")
    try:
        with open(db_path) as f:
            db = json.load(f)
    except OSError as e:
        print(f"check-thread-safety: {db_path}: {e.strerror} "
              "(configure the build first)", file=sys.stderr)
        return 2

    entries = {}
    for entry in db:
        path = os.path.normpath(os.path.join(entry["directory"], entry["file"]))
        rel = os.path.relpath(path, root)
        if rel.startswith("..") or not rel.endswith(".cc"):
            continue  # generated (under the build directory) or third-party
        if rel.split(os.sep)[0] not in SOURCE_DIRS:
            continue
        entries.setdefault(rel, entry)  # one configuration per file
    if not entries:
        print("check-thread-safety: no project sources in " + db_path,
              file=sys.stderr)
        return 2

    def check(rel):
        entry = entries[rel]
        proc = subprocess.run(command_for(entry, args.clang),
                              cwd=entry["directory"], capture_output=True,
                              text=True)
        return rel, proc.returncode, proc.stderr

    start = time.monotonic()
    failed = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for rel, code, output in pool.map(check, sorted(entries)):
            if code != 0:
                failed.append(rel)
                sys.stdout.write(output)
    print(f"check-thread-safety: {len(entries)} files, {len(failed)} with "
          f"findings, {time.monotonic() - start:.0f} s")
    for rel in failed:
        print(f"  {rel}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
