#!/usr/bin/python3
"""libscps.so exports exactly the public API: every function declared in the
public headers (as installed), nothing else, each in version node SCPS_0,
and cmake/libscps.map lists the same names.

  check_exports.py --cc GCC --lib LIBSCPS_SO --map LIBSCPS_MAP --include INCLUDEDIR
                   --soname SONAME HEADER...

The declarations come from the compiler (GCC's -aux-info), not from reading
the headers as text; public means declared in one of the HEADERs, so
functions of the headers they include for their types do not count."""
import argparse
import os
import re
import subprocess
import sys
import tempfile

VERSION_NODE = "SCPS_0"


def declared(cc, include, headers):
    with tempfile.TemporaryDirectory() as tmp:
        aux = os.path.join(tmp, "aux.txt")
        src = "".join("#include <scps/%s>\n" % h for h in headers)
        subprocess.run([cc, "-std=c11", "-fsyntax-only", "-aux-info", aux, "-I", include, "-x", "c", "-"],
                       input=src, text=True, check=True)
        lines = open(aux).read().splitlines()
    names = {}
    for line in lines:
        m = re.match(r"/\* (.+?):\d+:\w+ \*/ (.*);$", line)
        if not m or os.path.basename(m.group(1)) not in headers:
            continue
        if os.path.realpath(os.path.dirname(m.group(1))) != os.path.realpath(os.path.join(include, "scps")):
            continue
        name = re.search(r"(\w+) \(", m.group(2))
        if name:
            names[name.group(1)] = os.path.basename(m.group(1))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], text=True, check=True,
                         stdout=subprocess.PIPE).stdout
    names, problems = set(), []
    for line in out.splitlines():
        parts = line.split()
        kind, sym = parts[-2], parts[-1]
        if kind == "A" and sym == VERSION_NODE:
            continue
        name, _, version = sym.partition("@")
        if version.lstrip("@") != VERSION_NODE:
            problems.append("%s (%s) is not in version node %s" % (name, kind, VERSION_NODE))
        if kind not in "TW":
            problems.append("%s is exported as a %s symbol, not a function" % (name, kind))
        names.add(name)
    return names, problems


def in_map(path):
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    m = re.search(VERSION_NODE + r"\s*\{\s*global:(.*?)local:\s*\*;\s*\};", text, flags=re.S)
    if not m:
        sys.exit("%s: no '%s { global: ... local: *; };'" % (path, VERSION_NODE))
    return {n.strip() for n in m.group(1).split(";") if n.strip()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--map", required=True)
    ap.add_argument("--include", required=True)
    ap.add_argument("--soname", required=True)
    ap.add_argument("headers", nargs="+")
    a = ap.parse_args()

    public = declared(a.cc, a.include, a.headers)
    exports, problems = exported(a.lib)
    listed = in_map(a.map)
    for name, header in sorted(public.items()):
        if not name.startswith("scps_") or name.startswith("scps__"):
            problems.append("%s (declared in %s) is not named scps_*" % (name, header))
        if name not in exports:
            problems.append("%s (declared in %s) is not exported by %s" % (name, header, a.lib))
        if name not in listed:
            problems.append("%s (declared in %s) is missing from %s" % (name, header, a.map))
    for name in sorted(exports - set(public)):
        problems.append("%s is exported but declared in none of %s" % (name, ", ".join(a.headers)))
    for name in sorted(listed - set(public)):
        problems.append("%s is listed in %s but declared in none of the public headers" % (name, a.map))
    dyn = subprocess.run(["readelf", "-d", a.lib], text=True, check=True, stdout=subprocess.PIPE).stdout
    soname = re.search(r"\(SONAME\).*\[(.*)\]", dyn)
    if not soname or soname.group(1) != a.soname:
        problems.append("soname %s, want %s" % (soname.group(1) if soname else "(none)", a.soname))
    if not public:
        problems.append("no function declared in %s: is the include directory right?" % ", ".join(a.headers))
    # Installed only because a public header includes them (engine headers
    # today): their functions are not exported, so a program must not call them.
    extra = sorted(set(os.listdir(os.path.join(a.include, "scps"))) - set(a.headers))
    if extra:
        print("note: installed but not public (their functions are not exported): " + ", ".join(extra))
    for p in problems:
        print("FAILED: " + p)
    if problems:
        return 1
    print("install_exports: %d public functions, all exported in %s and listed in %s; nothing else exported"
          % (len(public), VERSION_NODE, os.path.basename(a.map)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
