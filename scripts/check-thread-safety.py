#!/usr/bin/env python3
"""Clang's thread-safety analysis over every project translation unit.

Reads compile_commands.json from a configured build directory (`make
thread-safety` uses a clang configuration in build-clang/ where only the
generated headers are built; GCC commands work too) and runs `clang++ -fsyntax-only` on each of the project's own .cc
files (not generated protobuf code, not third-party code) with only the
thread-safety warnings enabled, as errors. Nothing is linked; the only
files written are precompiled headers, in BUILD_DIR/thread-safety-pch/.

Most of the time of a syntax-only pass is parsing gRPC's, gtest's and
gmock's headers again in every file. Files that share a command line (one
CMake target's flags) share one precompiled header: gtest and gmock for
tests, gRPC's for files that include gRPC or protobuf code (a file checks
in 0.55-0.8x its time without one). A file whose check
fails with it is checked again without it, and only that result counts.

A clang build of the project checks the same annotations as it compiles
(cmake/AsideHelpers.cmake adds -Wthread-safety for clang, and -Werror
makes it fatal). `--except-built DIR:TARGET` leaves out the files such a
build has compiled: every source of TARGET in the clang build directory
DIR, when DIR is configured with clang and -Werror and TARGET is up to date
there (else nothing is left out, and the reason is printed). CI builds the
unit tests under ASan with clang, then checks only the rest here.

  scripts/check-thread-safety.py [BUILD_DIR] [--jobs N] [--clang CLANG++]
                                 [--except-built DIR:TARGET]

Exit status 0 when every file is clean, 1 when the analysis reports
something (the diagnostics are printed), 2 on a usage error.
"""

import argparse
import concurrent.futures
import hashlib
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


# A command line shared by fewer files is not worth a precompiled header.
PCH_MIN_FILES = 3


def uses_grpc(path):
    """Whether the file at `path` includes gRPC or generated protobuf code."""
    try:
        with open(path, errors="replace") as f:
            lines = [l for l in f if l.startswith("#include")]
    except OSError:
        return False
    return any("grpc" in l or ".pb.h" in l for l in lines)


def pch_headers(flags, paths):
    """The headers to precompile for files of one command line."""
    headers = []
    if "-DGTEST_HAS_PTHREAD=1" in flags:
        headers += ["gtest/gtest.h", "gmock/gmock.h"]
    if any(uses_grpc(p) for p in paths):
        headers.append("grpcpp/grpcpp.h")
    return headers


def flags_of(entry, command):
    """`command` (the check's for `entry`) without the compiler and source."""
    return tuple(a for a in command[1:] if a != entry["file"])


def make_pch(flags, headers, directory, out_dir, clang):
    """Precompiles `headers` under `flags`; the .pch path, or None."""
    digest = hashlib.sha1(
        "\0".join(flags + tuple(headers)).encode()).hexdigest()[:16]
    header = os.path.join(out_dir, digest + ".hxx")
    pch = header + ".pch"
    with open(header, "w") as f:
        f.writelines(f"#include <{h}>\n" for h in headers)
    args = [clang] + [a for a in flags if a != "-fsyntax-only"]
    args += ["-x", "c++-header", header, "-o", pch]
    proc = subprocess.run(args, cwd=directory, capture_output=True, text=True)
    return pch if proc.returncode == 0 else None


def cache_value(build_dir, name):
    """A CMakeCache.txt entry's value, or None."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            for line in f:
                key, _, value = line.rstrip("\n").partition("=")
                if key.split(":")[0] == name:
                    return value
    except OSError:
        pass
    return None


def built_sources(spec, root):
    """The project sources a clang build has compiled with the analysis on
    (spec "DIR:TARGET"), as paths relative to `root`; (set, why-not)."""
    build_dir, _, target = spec.rpartition(":")
    if not build_dir or not target:
        return set(), f"--except-built {spec}: expected DIR:TARGET"
    compiler = cache_value(build_dir, "CMAKE_CXX_COMPILER") or ""
    if "clang" not in os.path.basename(compiler):
        return set(), f"{build_dir} is not a clang build"
    if (cache_value(build_dir, "ASIDE_WERROR") or "ON").upper() in (
            "OFF", "0", "FALSE", "NO"):
        return set(), f"{build_dir} is built without -Werror"
    dry = subprocess.run(["ninja", "-C", build_dir, "-n", target],
                         capture_output=True, text=True)
    if dry.returncode != 0 or "no work to do" not in dry.stdout:
        return set(), f"{target} is not built and up to date in {build_dir}"
    inputs = subprocess.run(["ninja", "-C", build_dir, "-t", "inputs", target],
                            capture_output=True, text=True)
    if inputs.returncode != 0:
        return set(), f"ninja -t inputs {target}: {inputs.stderr.strip()}"
    built = set()
    for line in inputs.stdout.splitlines():
        path = os.path.normpath(os.path.join(build_dir, line.strip()))
        rel = os.path.relpath(path, root)
        if rel.endswith(".cc") and not rel.startswith(".."):
            built.add(rel)
    return built, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", default="build-clang")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--clang", default=os.environ.get("CLANGXX", "clang++"))
    parser.add_argument("--except-built", action="append", default=[],
                        metavar="DIR:TARGET")
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

    skipped = 0
    for spec in args.except_built:
        built, why_not = built_sources(spec, root)
        if why_not:
            print(f"check-thread-safety: checking every file: {why_not}")
            continue
        for rel in built & entries.keys():
            del entries[rel]
            skipped += 1
    if skipped:
        print(f"check-thread-safety: {skipped} files left out, compiled with "
              f"the analysis by {', '.join(args.except_built)}")
    if not entries:
        print("check-thread-safety: nothing left to check")
        return 0

    start = time.monotonic()
    # Each file's check, and the files of each command line.
    commands = {rel: command_for(entry, args.clang)
                for rel, entry in entries.items()}
    flags = {rel: flags_of(entries[rel], commands[rel]) for rel in entries}
    by_flags = {}
    for rel in entries:
        by_flags.setdefault(flags[rel], []).append(rel)
    pch_jobs = {}
    for line, files in by_flags.items():
        if len(files) >= PCH_MIN_FILES:
            headers = pch_headers(line, [os.path.join(root, f) for f in files])
            if headers:
                pch_jobs[line] = headers
    out_dir = os.path.join(os.path.abspath(args.build_dir), "thread-safety-pch")
    os.makedirs(out_dir, exist_ok=True)
    pch_of = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        made = {line: pool.submit(make_pch, line, headers,
                                  entries[by_flags[line][0]]["directory"],
                                  out_dir, args.clang)
                for line, headers in pch_jobs.items()}
        for line, future in made.items():
            if (pch := future.result()) is not None:
                pch_of[line] = pch

    def check(rel):
        entry = entries[rel]
        command = commands[rel]
        pch = pch_of.get(flags[rel])
        if pch is not None:
            proc = subprocess.run(command + ["-include-pch", pch],
                                  cwd=entry["directory"], capture_output=True,
                                  text=True)
            if proc.returncode == 0:
                return rel, 0, "", False
        proc = subprocess.run(command, cwd=entry["directory"],
                              capture_output=True, text=True)
        return rel, proc.returncode, proc.stderr, pch is not None

    failed = []
    rechecked = 0
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for rel, code, output, again in pool.map(check, sorted(entries)):
            rechecked += again
            if code != 0:
                failed.append(rel)
                sys.stdout.write(output)
    print(f"check-thread-safety: {len(entries)} files ({len(pch_of)} "
          f"precompiled headers, {rechecked} files checked again without), "
          f"{len(failed)} with findings, {time.monotonic() - start:.0f} s")
    for rel in failed:
        print(f"  {rel}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
