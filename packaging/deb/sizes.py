#!/usr/bin/env python3
"""Where the package's bytes go: each program linked both ways from one release
build, with the linker's map, attributed to its parts.

    packaging/deb/sizes.py SCRATCH [KEEP]   (SCRATCH: the deb target's build directory;
                                             KEEP: a directory to leave the linked programs in)

The package's build links one program, tokend (all four by the name it runs
as); a build of every product links four, and each is measured. Each program
is linked again from SCRATCH's own link command (release.yaml) with gold, whose
map this reads, once against the shared runtime and once with -static-stdlib
(as the package did before), with `-Xlinker -Map`; and once exactly as the
package links it (lld, packed relocations), for its size. Every input
section the linker kept that takes room in the stripped file is counted for
the library or module it came from; what the linker makes itself (relocations,
dynamic symbols, the unwind index, headers) is "linker-made". The stripped size is `strip --strip-unneeded` as
packaging/deb/build.sh does it.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

PROGRAMS = ["tokend", "tokenctl", "tokend-proxy", "tokend-native-host"]
STATIC_FOUNDATION = ["Foundation", "CoreFoundation", "FoundationInternationalization", "_FoundationICU",
                     "FoundationEssentials", "_FoundationCShims", "_FoundationCollections", "swiftDispatch", "dispatch",
                     "BlocksRuntime", "swiftSynchronization", "stdc++"]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Sections that are not in the stripped file (or take no room in it).
NOT_SHIPPED = re.compile(r"^\.(debug|comment|note|symtab|strtab|shstrtab|bss|tbss)")
# The toolchain's static archives, by the part they belong to.
RUNTIME_PARTS = [
    ("ICU data", re.compile(r"lib_FoundationICU\.a\(icu_packaged_data")),
    ("ICU (code)", re.compile(r"lib_FoundationICU\.a")),
    ("FoundationInternationalization", re.compile(r"libFoundationInternationalization\.a")),
    ("Foundation (+ CoreFoundation)", re.compile(r"lib(Foundation|CoreFoundation)\.a")),
    ("FoundationEssentials", re.compile(r"lib(FoundationEssentials|_FoundationCShims|_FoundationCollections)\.a")),
    ("Swift runtime (stdlib, concurrency, dispatch)", re.compile(r"/swift_static/|/lib/swift/linux/")),
]


def link_commands(scratch: str) -> dict[str, list[str]]:
    """Each program's link command, from the build manifest SwiftPM wrote."""
    commands = {}
    with open(os.path.join(scratch, "release.yaml")) as manifest:
        for line in manifest:
            line = line.strip()
            if not line.startswith("args: [") or '"-emit-executable"' not in line:
                continue
            args = json.loads(line[len("args: "):])
            output = os.path.basename(args[args.index("-o") + 1])
            # (the manifest names every product; only those built have their objects)
            if output in PROGRAMS and os.path.exists(args[args.index("-o") + 1]):
                commands[output] = args
    if "tokend" not in commands:
        sys.exit(f"no link command for tokend in {scratch}/release.yaml")
    return commands


def target_packages(scratch: str) -> dict[str, str]:
    """Module (target) name -> the package it is from; ours are 'own code'."""
    owners = {name.replace("-", "_"): "own code" for name in os.listdir(os.path.join(ROOT, "Sources"))}
    checkouts = os.path.join(scratch, "checkouts")
    for package in os.listdir(checkouts):
        sources = os.path.join(checkouts, package, "Sources")
        if os.path.isdir(sources):
            for target in os.listdir(sources):
                owners.setdefault(target.replace("-", "_"), package)
    return owners


def part_of(path: str, owners: dict[str, str]) -> str:
    for part, pattern in RUNTIME_PARTS:
        if pattern.search(path):
            return part
    built = re.search(r"/release/([^/]+)\.build/", path)
    if built:
        return owners.get(built.group(1), built.group(1))
    return "C runtime (crt, libgcc)"


def attribute(map_path: str, owners: dict[str, str]) -> dict[str, int]:
    """Bytes per part, from gold's map (the linker swiftc uses on Linux): after 'Memory map', an
    output section starts in column 0, an input section (or '** ' for what gold makes) in column 1;
    a long name puts its address, size and file on the next line."""
    sizes: dict[str, int] = defaultdict(int)
    numbers = re.compile(r"^\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)(?:\s+(.*))?$")
    output_section, pending, in_map = "", None, False
    with open(map_path, errors="replace") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if not in_map:
                in_map = line == "Memory map"
                continue
            if not line.strip():
                continue
            if pending is None:
                head = re.match(r"^(\S+|  ?\*\* [^0]+?| \S+)(\s+0x.*)?$", line)
                if not head or line.lstrip().startswith("0x"):
                    continue  # a symbol's address, or a line gold continues
                name, rest = head.group(1), head.group(2)
                if not rest:
                    pending = name
                    continue
                line = rest
            else:
                name, pending = pending, None
            match = numbers.match(line)
            if not match:
                continue
            size, path = int(match.group(2), 16), (match.group(3) or "").strip()
            if not name.startswith(" "):
                output_section = name
            elif size and not NOT_SHIPPED.match(output_section):
                if name.lstrip().startswith("**"):
                    sizes["linker-made"] += size
                else:
                    sizes[part_of(path, owners)] += size
    return sizes


def gold(args: list[str]) -> list[str]:
    """The link command with gold, whose map `attribute` reads, in place of the package's lld and its
    packed relocations (which only make the relocation table smaller: see the package's row)."""
    args = [a for a in args if a != "-use-ld=lld"]
    while "pack-relative-relocs" in args:
        i = args.index("pack-relative-relocs")
        del args[i - 3:i + 1]  # -Xlinker -z -Xlinker pack-relative-relocs
    return args


def strip_size(output: str) -> int:
    stripped = output + ".stripped"
    subprocess.run(["strip", "--strip-unneeded", "--remove-section=.comment", "--remove-section=.note",
                    "-o", stripped, output], check=True)
    return os.path.getsize(stripped)


def package_link(args: list[str], output: str) -> int:
    """The stripped size of the link exactly as the package's build makes it."""
    args = list(args)
    args[args.index("-o") + 1] = output
    subprocess.run(args, check=True)
    return strip_size(output)


def link(args: list[str], output: str, static: bool) -> dict[str, int]:
    args = gold(args)
    args[args.index("-o") + 1] = output
    args += ["-Xlinker", f"-Map={output}.map"]
    if static:
        # Objects compiled against the shared runtime name only Foundation's shared library for the
        # linker; its static archives need their companions named, in one group (they use each other).
        args += ["-static-stdlib", "-Xlinker", "--start-group"] + [f"-l{lib}" for lib in STATIC_FOUNDATION] + [
            "-Xlinker", "--end-group"]
    else:
        args = [a for a in args if a != "-static-stdlib"]
    subprocess.run(args, check=True)
    return {"file": strip_size(output)}


def foundation_users(args: list[str], program: str, runtime: str) -> dict[str, list[str]]:
    """What ties a program to Foundation (and so to FoundationInternationalization and ICU): the
    symbols of libFoundation.so it links, by the module whose object files use them."""
    def symbols(*command: str) -> list[str]:
        return subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()
    foundation = set(symbols("nm", "-D", "--defined-only", "--format=just-symbols",
                             os.path.join(runtime, "libFoundation.so")))
    linked = set(symbols("nm", "-D", "--undefined-only", "--format=just-symbols", program)) & foundation
    objects = [line.strip() for line in open(next(a[1:] for a in args if a.startswith("@")))]
    users: dict[str, set[str]] = defaultdict(set)
    for line in symbols("nm", "-A", "--undefined-only", "--format=posix", *[o.strip("'\"") for o in objects]):
        path, _, rest = line.partition(": ")
        symbol = rest.split(" ")[0]
        module = re.search(r"/([^/]+)\.build/", path)
        if symbol in linked and module:
            users[module.group(1)].add(symbol)
    names = {}
    for module, used in users.items():
        demangled = symbols("swift", "demangle", "--simplified", "--compact", *sorted(used)[:200])
        names[module] = sorted({re.sub(r"^(static |protocol conformance descriptor for |type metadata for )", "", d)
                                .split("(")[0] for d in demangled})
    return names


def mb(n: int) -> str:
    return f"{n / 1e6:.1f}" if n >= 50_000 else ("–" if n == 0 else "<0.1")


def main() -> None:
    scratch = os.path.abspath(sys.argv[1])
    commands, owners = link_commands(scratch), target_packages(scratch)
    results: dict[tuple[str, str], dict[str, int]] = {}
    users: dict[str, dict[str, list[str]]] = {}
    packaged: dict[str, int] = {}
    target = json.loads(subprocess.run(["swiftc", "-print-target-info"], check=True, capture_output=True).stdout)
    runtime = target["paths"]["runtimeLibraryPaths"][0]
    with tempfile.TemporaryDirectory() as temporary:
        work = sys.argv[2] if len(sys.argv) > 2 else temporary
        os.makedirs(work, exist_ok=True)
        for program in commands:
            for mode in ("static", "shared"):
                output = os.path.join(work, f"{program}-{mode}")
                sizes = link(commands[program], output, mode == "static")
                sizes.update(attribute(output + ".map", owners))
                results[(program, mode)] = sizes
            packaged[program] = package_link(commands[program], os.path.join(work, f"{program}-package"))
            users[program] = foundation_users(commands[program], os.path.join(work, f"{program}-shared"), runtime)
    parts = sorted({p for r in results.values() for p in r if p != "file"},
                   key=lambda p: -max(r.get(p, 0) for r in results.values()))
    programs = [p for p in PROGRAMS if p in commands]
    columns = [(p, m) for p in programs for m in ("static", "shared")]
    table = ["| part (MB) | " + " | ".join(f"{p} {m}" for p, m in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for part in parts:
        table.append(f"| {part} | " + " | ".join(mb(results[c].get(part, 0)) for c in columns) + " |")
    table.append("| padding, section headers | " + " | ".join(
        mb(results[c]["file"] - sum(v for k, v in results[c].items() if k != "file")) for c in columns) + " |")
    table.append("| **stripped file** | " + " | ".join(f"**{mb(results[c]['file'])}**" for c in columns) + " |")
    table.append("| the package's link (its linker and flags), stripped | " + " | ".join(
        f"{mb(packaged[p])}" if m == "shared" else "" for p, m in columns) + " |")
    print("\n".join(table))
    print("\nWhat ties each program to Foundation (the symbols of libFoundation.so it uses, by module):")
    for program in programs:
        print(f"\n{program}:")
        for module, names in sorted(users[program].items(), key=lambda u: -len(u[1])):
            print(f"  {module} ({len(names)}): {', '.join(names[:8])}{' …' if len(names) > 8 else ''}")


if __name__ == "__main__":
    main()
