#!/usr/bin/env python3
"""Checks the layering of the C++ libraries against the one place it is declared.

Each src/<lib>/ is the static library mld_<lib>, and CMakeLists.txt's
`mld_library(<lib> mld_<dep>...)` calls are the dependency graph. The build
already refuses an #include of a library that is not linked (each target sees
only the include views of what it links, see mld_include_views); this script
checks the same rule from the sources, so a header nobody compiles is covered
too and the message names the edge, and it keeps the graph acyclic:

  - every `#include "x/..."` (or <x/...>, or a relative path into src/x/) in
    src/<lib>/ names <lib> itself or a library in <lib>'s transitive
    dependency closure; other src/ directories (cli, trace, mpi: not layered)
    may be included by no library;
  - the mld_library graph has no cycle, names only declared libraries, and is
    not extended by target_link_libraries(mld_<lib> ... mld_<other>) calls
    elsewhere (the diagram would not show them).

It also draws the layer diagram from the graph (a library's layer is its
longest chain of links down to a library that links none), for docs/design.md.

  tools/check-layers.py                         check; exit 1 on a violation
  tools/check-layers.py --check-doc docs/design.md   also check the diagram there is current
  tools/check-layers.py --diagram               print the diagram
  tools/check-layers.py --update-doc docs/design.md  rewrite it between the markers
  --source-dir DIR                              another tree (default: this repository)

Relative paths given to --check-doc and --update-doc are relative to the
source directory. Python 3 standard library only.
"""
import argparse
import difflib
import os
import re
import sys
import textwrap

BEGIN = "<!-- layers:begin -->"
END = "<!-- layers:end -->"
SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".inc", ".c", ".cc", ".cpp")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
CALL_RE = re.compile(r"(?<![\w-])(mld_library|target_link_libraries)\s*\(([^)]*)\)", re.S)


class Graph:
    def __init__(self):
        self.deps = {}  # library -> [mld_ dependencies, as declared]
        self.external = {}  # library -> [other link items]
        self.line = {}  # library -> line of its mld_library call
        self.errors = []


def strip_cmake_comments(text):
    """The text with # comments blanked (not inside quoted arguments), so that
    offsets and line numbers are unchanged."""
    out = []
    for line in text.split("\n"):
        quoted = False
        cut = len(line)
        for i, c in enumerate(line):
            if c == '"' and (i == 0 or line[i - 1] != "\\"):
                quoted = not quoted
            elif c == "#" and not quoted:
                cut = i
                break
        out.append(line[:cut] + " " * (len(line) - cut))
    return "\n".join(out)


def external_name(item):
    """How a non-library link item reads in the diagram: mld_dep_hs -> hs,
    nlohmann_json::nlohmann_json -> nlohmann_json."""
    if item.startswith("mld_dep_"):
        return item[len("mld_dep_"):]
    return item.split("::")[0]


def read_graph(cmake_path):
    g = Graph()
    text = strip_cmake_comments(open(cmake_path, encoding="utf-8").read())
    links_elsewhere = []
    for m in CALL_RE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        args = m.group(2).split()
        if m.group(1) == "mld_library":
            if not args or args[0].startswith("$"):
                continue  # the function's own body, or a computed name
            name = args[0]
            if name in g.deps:
                g.errors.append("CMakeLists.txt:%d: mld_library(%s) is declared twice (also line %d)"
                                % (line, name, g.line[name]))
                continue
            g.line[name] = line
            g.deps[name] = [a[len("mld_"):] for a in args[1:]
                            if a.startswith("mld_") and not a.startswith("mld_dep_")]
            g.external[name] = [external_name(a) for a in args[1:]
                                if not (a.startswith("mld_") and not a.startswith("mld_dep_"))
                                and a not in ("PUBLIC", "PRIVATE", "INTERFACE")]
        elif args and args[0].startswith("mld_") and not args[0].startswith("mld_dep_"):
            links_elsewhere.append((line, args[0][len("mld_"):], args[1:]))
    for line, name, items in links_elsewhere:
        if name not in g.deps:
            continue
        for a in items:
            if a.startswith("mld_") and not a.startswith("mld_dep_"):
                g.errors.append("CMakeLists.txt:%d: target_link_libraries(mld_%s ... %s): declare the "
                                "link in mld_library(%s ...) (line %d), the layer graph is read from there"
                                % (line, name, a, name, g.line[name]))
    for name, deps in g.deps.items():
        for d in deps:
            if d not in g.deps:
                g.errors.append("CMakeLists.txt:%d: mld_library(%s) links mld_%s, which no mld_library() declares"
                                % (g.line[name], name, d))
    return g


def find_cycle(deps):
    """One cycle of the graph as [a, b, ..., a], or None."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(n):
        state[n] = 1
        path.append(n)
        for d in sorted(deps.get(n, ())):
            if d not in deps:
                continue
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                c = visit(d)
                if c:
                    return c
        path.pop()
        state[n] = 2
        return None

    for n in sorted(deps):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def closure(deps, name):
    seen, todo = set(), list(deps.get(name, ()))
    while todo:
        d = todo.pop()
        if d in seen:
            continue
        seen.add(d)
        todo.extend(deps.get(d, ()))
    return seen


def layers(deps):
    """{library: layer}, the layer being the longest chain of links below it."""
    memo = {}

    def layer(n):
        if n not in memo:
            below = [layer(d) for d in deps[n] if d in deps]
            memo[n] = 1 + max(below) if below else 0
        return memo[n]

    for n in deps:
        layer(n)
    return memo


def included_dir(src_root, path, quote, target):
    """The src/ directory an include line names, or None (a system or
    third-party header, or the file's own directory)."""
    if quote == '"' and (target.startswith(".") or "/../" in target):
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
        rel = os.path.relpath(resolved, src_root)
        if rel.startswith(".." + os.sep) or os.sep not in rel:
            return None
        return rel.split(os.sep)[0]
    if "/" not in target:
        return None
    first = target.split("/")[0]
    return first if os.path.isdir(os.path.join(src_root, first)) else None


def check_includes(source_dir, g):
    src_root = os.path.join(source_dir, "src")
    errors = []
    for lib in sorted(g.deps):
        lib_dir = os.path.join(src_root, lib)
        if not os.path.isdir(lib_dir):
            errors.append("CMakeLists.txt:%d: mld_library(%s) has no directory src/%s"
                          % (g.line[lib], lib, lib))
            continue
        allowed = closure(g.deps, lib) | {lib}
        for dirpath, dirnames, filenames in os.walk(lib_dir):
            dirnames.sort()
            for fn in sorted(filenames):
                if not fn.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, source_dir)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE_RE.match(line)
                        if not m:
                            continue
                        target = included_dir(src_root, path, m.group(1), m.group(2))
                        if target is None or target in allowed:
                            continue
                        if target in g.deps:
                            why = "%s does not link %s (directly or through its dependencies: %s)" % (
                                lib, target, ", ".join(sorted(allowed - {lib})) or "none")
                        else:
                            why = "src/%s is not a layered library (no mld_library), no library may include it" % target
                        errors.append("%s:%d: %s -> %s: #include %s%s%s: %s" % (
                            rel, n, lib, target, m.group(1), m.group(2),
                            '"' if m.group(1) == '"' else ">", why))
    return errors


def diagram(source_dir, g):
    """The generated Markdown between the markers of docs/design.md."""
    layer = layers(g.deps)
    top = max(layer.values()) if layer else 0
    src_root = os.path.join(source_dir, "src")
    others = sorted(d for d in os.listdir(src_root)
                    if os.path.isdir(os.path.join(src_root, d)) and d not in g.deps) \
        if os.path.isdir(src_root) else []
    order = sorted(g.deps, key=lambda n: (-layer[n], n))
    out = ["<!-- Generated from CMakeLists.txt's mld_library() calls by",
           "     tools/check-layers.py --update-doc docs/design.md; do not edit. -->",
           "```"]
    for n in range(top, -1, -1):
        out.append(("layer %d  " % n + "  ".join(sorted(k for k in g.deps if layer[k] == n))).rstrip())
    out.append("```")
    out.append("")
    prose = ("A library's layer is its longest chain of links down to one that links none. It links "
             "only to lower layers and includes only the headers of what it links (the build and "
             "`ctest -R layers` check both).")
    if others:
        prose += (" " + ", ".join("`src/%s`" % d for d in others)
                  + (" are not layered libraries" if len(others) > 1 else " is not a layered library")
                  + " (no `mld_library`); no library includes their headers.")
    out += textwrap.wrap(prose, 100, break_on_hyphens=False)
    out.append("")
    out.append("| layer | library | links | other dependencies |")
    out.append("|---|---|---|---|")
    for n in order:
        out.append("| %d | `%s` | %s | %s |" % (
            layer[n], n, " ".join("`%s`" % d for d in sorted(g.deps[n])),
            " ".join(sorted(set(g.external[n])))))
    return "\n".join(out) + "\n"


def doc_path(source_dir, p):
    return p if os.path.isabs(p) else os.path.join(source_dir, p)


def replace_block(text, block, name):
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < b:
        raise SystemExit("check-layers: %s has no %s ... %s markers" % (name, BEGIN, END))
    return text[:b + len(BEGIN)] + "\n" + block + text[e:]


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source-dir", default=here, help="the tree to check (default: %(default)s)")
    ap.add_argument("--diagram", action="store_true", help="print the layer diagram and exit")
    ap.add_argument("--update-doc", metavar="FILE", help="rewrite the diagram between the markers of FILE")
    ap.add_argument("--check-doc", metavar="FILE", help="also fail when FILE's diagram is not current")
    args = ap.parse_args()
    source_dir = os.path.abspath(args.source_dir)
    cmake = os.path.join(source_dir, "CMakeLists.txt")
    if not os.path.isfile(cmake):
        print("check-layers: no CMakeLists.txt in %s" % source_dir, file=sys.stderr)
        return 2
    g = read_graph(cmake)
    errors = list(g.errors)
    cycle = find_cycle(g.deps)
    if cycle:
        errors.append("CMakeLists.txt:%d: cycle in the library graph: %s"
                      % (g.line[cycle[0]], " -> ".join(cycle)))
    if (args.diagram or args.update_doc) and (cycle or g.errors):
        for e in errors:
            print("error: " + e, file=sys.stderr)
        return 1
    if args.diagram:
        sys.stdout.write(diagram(source_dir, g))
        return 0
    if args.update_doc:
        path = doc_path(source_dir, args.update_doc)
        old = open(path, encoding="utf-8").read()
        new = replace_block(old, diagram(source_dir, g), args.update_doc)
        if new != old:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            print("check-layers: updated %s" % args.update_doc)
        return 0

    if not cycle:
        errors += check_includes(source_dir, g)
    if args.check_doc and not cycle and not g.errors:
        path = doc_path(source_dir, args.check_doc)
        old = open(path, encoding="utf-8").read()
        new = replace_block(old, diagram(source_dir, g), args.check_doc)
        if new != old:
            sys.stderr.writelines(difflib.unified_diff(
                old.splitlines(True), new.splitlines(True), args.check_doc, args.check_doc + " (generated)"))
            errors.append("%s: the layer diagram is not the one CMakeLists.txt gives; regenerate it with "
                          "`tools/check-layers.py --update-doc %s`" % (args.check_doc, args.check_doc))
    for e in errors:
        print("error: " + e, file=sys.stderr)
    if errors:
        print("check-layers: %d error%s" % (len(errors), "s" if len(errors) > 1 else ""), file=sys.stderr)
        return 1
    print("check-layers: %d libraries, %d layers, every include follows the graph"
          % (len(g.deps), max(layers(g.deps).values(), default=-1) + 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
