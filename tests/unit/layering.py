#!/usr/bin/python3
"""The source tree's layering, from its #include "..." lines.

A file's node is its name without .c/.h: a .c and its .h are one node. Checks
  1. no cycle among the nodes of server/ (an include path that comes back);
  2. proto/ includes nothing from server/ or client/;
  3. shard/ includes nothing from proto/, server/ or client/;
  4. no .c/.h under server/ client/ proto/ shard/ is over MAX_LINES lines;
  5. client/'s own folder holds only libscps: no main() (programs live in
     its subfolders);
  6. every function with external linkage defined there is public (declared
     SCPS_EXTERN in a header of cmake/scps_library.cmake's
     SCPS_PUBLIC_HEADERS) and named scps_*, or internal and named scps__*
     (but for client/python's PyInit_*, whose name CPython dictates).
Prints every violation and exits 1 if there is one.

usage: layering.py [SOURCE_DIR]   (default: $SCPS_SOURCE_DIR, else ../.. of this file)
"""
import os
import re
import sys

MAX_LINES = 1000
FOLDERS = ("server", "client", "proto", "shard")
# folder -> folders whose files it may not include
FORBIDDEN = {
    "proto": ("server", "client"),
    "shard": ("proto", "server", "client"),
}
CYCLE_FREE = ("server",)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def node_of(name):
    base = os.path.basename(name)
    return base[:-2] if base.endswith((".c", ".h")) else base


def sources(root):
    """{folder: {relative path: text}} of the .c/.h files of each folder, subfolders included."""
    out = {}
    for folder in FOLDERS:
        files = {}
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    path = os.path.join(dirpath, n)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        files[os.path.relpath(path, root)] = f.read()
        out[folder] = files
    return out


def header_owner(src):
    """{header base name: folder} of every header the tree holds."""
    owner = {}
    for folder, files in src.items():
        for rel in files:
            if rel.endswith(".h"):
                owner.setdefault(os.path.basename(rel), folder)
    return owner


def find_cycle(graph):
    """A cycle of graph ({node: set of nodes}) as a list of nodes, first repeated last; None if none."""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def check_cycles(folder, files, problems):
    nodes = {node_of(rel) for rel in files}
    graph = {n: set() for n in nodes}
    why = {}
    for rel, text in files.items():
        a = node_of(rel)
        for inc in INCLUDE.findall(text):
            b = node_of(inc)
            if b in nodes and b != a:
                graph[a].add(b)
                why.setdefault((a, b), rel + ' includes "' + inc + '"')
    # Every cycle is reported: one is found, its last edge cut, and again.
    while True:
        cycle = find_cycle(graph)
        if not cycle:
            return
        problems.append(folder + "/: include cycle " + " -> ".join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            problems.append("    " + why[(a, b)])
        graph[cycle[-2]].discard(cycle[-1])


def check_forbidden(src, owner, problems):
    for folder, banned in FORBIDDEN.items():
        for rel, text in sorted(src[folder].items()):
            for inc in INCLUDE.findall(text):
                other = owner.get(os.path.basename(inc))
                if other in banned and other != folder:
                    problems.append('%s includes "%s", a header of %s/ (%s/ may not include %s/)'
                                    % (rel, inc, other, folder, "/, ".join(banned)))


def check_library_root(root, problems):
    folder = os.path.join(root, "client")
    for name in sorted(os.listdir(folder)):
        if name.endswith(".c"):
            with open(os.path.join(folder, name)) as f:
                if re.search(r"^int\s+main\s*\(", f.read(), re.M):
                    problems.append("client/%s: defines main(); programs belong in a subfolder of client/" % name)


DEFINITION = re.compile(r"^(?!static\b|typedef\b|extern\b|[A-Z_]*(?:INLINE|STATIC)\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(([^;{}]*)\)\s*\{",
                        re.M)


def public_functions(root):
    with open(os.path.join(root, "cmake", "scps_library.cmake")) as f:
        listed = re.search(r"set\(SCPS_PUBLIC_HEADERS(.*?)\)", f.read(), re.S).group(1)
    names = set()
    for h in re.findall(r"\$\{CMAKE_SOURCE_DIR\}/(\S+)", listed):
        with open(os.path.join(root, h)) as f:
            names |= set(re.findall(r"SCPS_EXTERN[^;(]*?\b(scps_\w+)\s*\(", f.read()))
    return names


def check_prefixes(root, src, problems):
    public = public_functions(root)
    for folder in FOLDERS:
        for rel, text in sorted(src[folder].items()):
            if not rel.endswith(".c"):
                continue
            for m in DEFINITION.finditer(text):
                name = m.group(1)
                if name == "main" or name.startswith("scps__") or name in public:
                    continue
                # A CPython extension's one export, named by CPython's rule.
                if name.startswith("PyInit_") and rel.startswith(os.path.join("client", "python") + os.sep):
                    continue
                why = "is not declared SCPS_EXTERN in a public header" if name.startswith("scps_") else \
                    "has external linkage without the scps_ or scps__ prefix"
                problems.append("%s: function %s %s: make it static, or name it scps__%s" %
                                (rel, name, why, name[5:] if name.startswith("scps_") else name))


def check_sizes(src, problems):
    for folder in FOLDERS:
        for rel, text in sorted(src[folder].items()):
            n = text.count("\n")
            if n <= MAX_LINES:
                continue
            problems.append("%s: %d lines, over %d" % (rel, n, MAX_LINES))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SCPS_SOURCE_DIR") or \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    src = sources(root)
    if not src["server"]:
        print("layering: no server/ sources under " + root)
        return 1
    problems = []
    for folder in CYCLE_FREE:
        check_cycles(folder, src[folder], problems)
    check_forbidden(src, header_owner(src), problems)
    check_sizes(src, problems)
    check_library_root(root, problems)
    check_prefixes(root, src, problems)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("layering: %d files of %s checked: no include cycle in %s, no forbidden include, none over %d lines, "
          "no program in client/, internal functions scps__*" % (sum(len(f) for f in src.values()), " ".join(f + "/" for f in FOLDERS),
                                     " ".join(f + "/" for f in CYCLE_FREE), MAX_LINES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
