#!/usr/bin/env python3
"""The import graph among the relay's top-level modules (src/*.rs and src/*/): which module
names which other one, and the cycles that run through the layers that should be leaves.

    python3 scripts/import_graph.py            # the graph, then the cycles
    python3 scripts/import_graph.py --where    # each edge with the file:line of every use
    python3 scripts/import_graph.py --check    # exit 1 if a layer is in a cycle or names a module above the layers

An edge `a -> b (n)` means the files of module `a` (src/a.rs, src/a/**) name module `b` in n
paths: `crate::b::...` anywhere (a `use`, a type, a call), each item of `use crate::{b, c}`,
and `super::...` that climbs out of `a` (`super::b` in src/a.rs or src/a/mod.rs,
`super::super::b` in src/a/x.rs; inline `mod x { }` blocks count as a level). `#[cfg(test)]`
code counts too. Comments and string literals are ignored. `crate::VERSION` and other items of
the crate root that are not modules are not edges.

The layers: config, db, publish and telemetry are meant to be leaves that the others build
on (issue 31): `--check` fails when one of them is in a cycle of the graph, i.e. can reach
itself through the others (`config -> publish -> config`, or `telemetry -> relay ->
telemetry`). Edges from a layer to a module that is not a layer are listed as well; they are
not cycles by themselves.

Python 3.11 standard library only; reads src/ relative to this script's repository.
"""

import os
import re
import sys
from collections import defaultdict, deque

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
# The base modules, and `pgurl`, the leaf that config checks a Postgres URL with and db
# connects with.
LAYERS = ("config", "db", "publish", "telemetry", "pgurl", "adopt")


def top_modules():
    """The library's top-level modules, from src/lib.rs's `mod` lines."""
    text = strip(read(os.path.join(SRC, "lib.rs")))
    return re.findall(r"\b(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", text)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip(text):
    """The text with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.match(r'b?r(#*)"', text[i:])) and (i == 0 or not (text[i - 1].isalnum()
                                                                        or text[i - 1] == "_")):
            end = text.find('"' + m.group(1), i + m.end())
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'", text[i:])):
            out.append(" " * m.end())
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def files_of(module):
    """(path, depth of the file's module below the crate root) for each file of `module`."""
    out = []
    single = os.path.join(SRC, module + ".rs")
    if os.path.isfile(single):
        out.append((single, 1))
    folder = os.path.join(SRC, module)
    for dirpath, _, filenames in os.walk(folder):
        for name in sorted(filenames):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            parts = os.path.relpath(path, SRC)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            out.append((path, len(parts)))
    return sorted(out)


def group_heads(text, start):
    """The first path segment of each item of the `{...}` group opening at text[start]."""
    depth, item, heads, i = 0, "", [], start
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c == "}":
            depth -= 1
            if depth == 0:
                heads.append(item)
                break
        elif c == "," and depth == 1:
            heads.append(item)
            item = ""
            i += 1
            continue
        if depth >= 1:
            item += c
        i += 1
    out = []
    for h in heads:
        m = re.match(r"\s*([A-Za-z_]\w*)", h)
        if m:
            out.append(m.group(1))
    return out


# `crate::` or a run of `super::`, then a name or a `{` group.
PATH_RE = re.compile(r"(?<![\w$])(crate|(?:super\s*::\s*)*super)\s*::\s*(\{|[A-Za-z_]\w*)")


def inline_depths(text):
    """For each offset, how many inline `mod x { ... }` blocks enclose it (as a list of
    (start, end, +1) spans, evaluated by `depth_at`)."""
    spans = []
    for m in re.finditer(r"\bmod\s+[a-z_]\w*\s*\{", text):
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        spans.append((m.end(), j))
    return spans


def edges_of(module, modules):
    found = defaultdict(list)  # target -> [(file, line)]
    for path, depth in files_of(module):
        text = strip(read(path))
        spans = inline_depths(text)
        for m in PATH_RE.finditer(text):
            head, name = m.group(1), m.group(2)
            if head == "crate":
                climbed_out = True
            else:
                supers = head.count("super")
                level = depth + sum(1 for s, e in spans if s <= m.start() < e)
                # `super` from a module at `level` below the root reaches level - supers; the
                # crate root is level 0, where the next name is a top-level module.
                climbed_out = level - supers == 0
            if not climbed_out:
                continue
            names = group_heads(text, m.start(2)) if name == "{" else [name]
            line = text.count("\n", 0, m.start()) + 1
            for target in names:
                if target in modules and target != module:
                    found[target].append((os.path.relpath(path, ROOT), line))
    return found


def graph():
    modules = top_modules()
    return modules, {m: edges_of(m, modules) for m in modules}


def sccs(nodes, adj):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def shortest_cycle(start, adj):
    """The shortest path start -> ... -> start, as a list of nodes, or None."""
    prev = {}
    queue = deque([start])
    seen = {start}
    while queue:
        v = queue.popleft()
        for w in sorted(adj[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    return None


def main(argv):
    show_where = "--where" in argv
    check = "--check" in argv
    modules, edges = graph()
    adj = {m: set(edges[m]) for m in modules}

    print("import graph of src/ (a -> b (n): n paths in a's files name crate::b)")
    for m in modules:
        if not edges[m]:
            print(f"  {m} -> (nothing)")
            continue
        targets = ", ".join(f"{t} ({len(edges[m][t])})" for t in sorted(edges[m]))
        print(f"  {m} -> {targets}")
        if show_where:
            for t in sorted(edges[m]):
                for path, line in edges[m][t]:
                    print(f"      {m} -> {t}: {path}:{line}")

    print()
    print(f"layers ({', '.join(LAYERS)}) naming a module that is not a layer:")
    upward = [(m, t) for m in LAYERS if m in edges for t in sorted(edges[m]) if t not in LAYERS]
    for m, t in upward:
        print(f"  {m} -> {t} ({len(edges[m][t])})")
    if not upward:
        print("  none")

    print()
    print("cycles through a layer:")
    bad = [c for c in sccs(modules, adj) if len(c) > 1 and any(m in LAYERS for m in c)]
    for comp in bad:
        print(f"  strongly connected: {', '.join(comp)}")
        for m in LAYERS:
            if m in comp:
                cycle = shortest_cycle(m, {v: adj[v] & set(comp) for v in comp})
                print(f"    shortest through {m}: {' -> '.join(cycle)}")
    if not bad:
        print("  none")
    if check and bad:
        print("import-graph: FAIL: a layer module is in a cycle", file=sys.stderr)
        return 1
    if check and upward:
        print("import-graph: FAIL: a layer module names a module above the layers", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
