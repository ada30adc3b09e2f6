#!/usr/bin/env python3
"""Import circles between the modules of a crate's library (default runtime/src).

Each file is a node; a path in it (`use crate::a::b`, `crate::a::b::c` in
code, `super::x`, `self::x`, a child module's name) is an edge to the
deepest module file the path names, following `pub use` re-exports of
modules (`pub use serve::limits` in lib.rs). Each edge between two files
becomes an edge between the sibling modules that hold them (commands/mod.rs
-> serve/mod.rs is commands -> serve; serve/worker.rs -> serve/metrics.rs is
serve/worker -> serve/metrics); an edge between a module and its own
children (serve/mod.rs -> serve/routes.rs, or back) is left out. A circle is
a strongly connected set of modules; prints each with the file edges that
close it, and exits 1 when there is one.

    python3 scripts/import-circles.py [--no-tests] [runtime/src]

With --no-tests, test code (files named tests.rs, `#[cfg(test)] mod`
blocks) is left out: the library's own graph, as a build without tests has it.
"""

import re
import sys
from pathlib import Path

args = [a for a in sys.argv[1:] if a != "--no-tests"]
NO_TESTS = "--no-tests" in sys.argv[1:]
root = Path(args[0] if args else "runtime/src")
BIN_ROOTS = {"main.rs"}


def module_of(rel: Path) -> tuple:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


files = {}  # module path -> file
for f in sorted(root.rglob("*.rs")):
    rel = f.relative_to(root)
    if rel.as_posix() in BIN_ROOTS or rel.parts[0] == "bin":
        continue
    if NO_TESTS and rel.name == "tests.rs":
        continue
    files[module_of(rel)] = rel.as_posix()


def strip_comments(src: str) -> str:
    """The source with every comment and every string, byte-string and
    character literal blanked, and line ends kept (so positions of the
    code stay meaningful). A small lexer, not a regex: a string may span
    lines (a backslash-continued message), raw strings (`r#"..."#`) may
    hold quotes, block comments nest, and `'a` is a lifetime, not a
    character. A regex that missed the backslash-continued line once
    flipped the quote parity of a whole file and erased its real imports
    as string text (scripts/test_import_circles.py pins this)."""
    out, i, n = [], 0, len(src)

    def blank(text):
        return "".join("\n" if c == "\n" else " " for c in text)

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif (m := re.match(r"(?:b|c)?r(#*)\"", src[i:])) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            close = '"' + m.group(1)
            j = src.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append('""' + blank(src[i + 2 : j]))
            i = j
        elif c == '"' or (src.startswith(('b"', 'c"'), i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_"))):
            j = i + (1 if c == '"' else 2)
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append('""' + blank(src[i + 2 : j]))
            i = j
        elif c == "'":
            # A character literal ('x', '\n', '\u{..}', b'x') or a lifetime / label ('a).
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F_]*\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'", src[i:])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_top(s: str) -> list:
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def use_paths(tree: str, prefix=()) -> list:
    """Flattens a use tree into paths (lists of segments)."""
    tree = tree.strip()
    if not tree:
        return []
    m = re.match(r"^((?:[\w]+\s*::\s*)*)\{(.*)\}$", tree, flags=re.S)
    if m:
        head = [p for p in re.split(r"\s*::\s*", m.group(1).strip()) if p]
        out = []
        for sub in split_top(m.group(2)):
            out += use_paths(sub, prefix + tuple(head))
        return out
    tree = re.sub(r"\s+as\s+\w+$", "", tree)
    segs = [p for p in re.split(r"\s*::\s*", tree) if p]
    return [prefix + tuple(segs)]


def inline_mod_spans(src: str) -> list:
    """(start, end) of each inline `mod name { ... }` block."""
    spans = []
    for m in re.finditer(r"\bmod\s+\w+\s*\{", src):
        depth, i = 0, m.end() - 1
        while i < len(src):
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            if depth == 0:
                break
            i += 1
        spans.append((m.start(), i))
    return spans


def absolute(mod: tuple, segs: tuple, inline_depth: int):
    """The path from the crate root, or None for an external crate.
    `inline_depth` inline modules enclose the path: its first that many
    `super`s stay in this file."""
    if not segs:
        return None
    here = list(mod)
    head, rest = segs[0], list(segs[1:])
    if head == "crate":
        return tuple(rest)
    if head == "self":
        return tuple(here + rest)
    if head == "super":
        ups = 1
        while rest and rest[0] == "super":
            ups += 1
            rest = rest[1:]
        ups = max(0, ups - inline_depth)
        return tuple((here[: len(here) - ups] if ups else here) + rest)
    # A bare first segment: a child module of this one (`use routes::App`).
    if tuple(here + [head]) in files:
        return tuple(here + [head] + rest)
    return None


reexports = {}  # module path -> its target, for `pub use x::y;` of modules


def resolve(path: tuple, depth=0):
    best = ()
    for i in range(len(path), -1, -1):
        p = path[:i]
        if p in files:
            best = p
            break
    if depth < 8 and len(path) > len(best):
        alias = best + (path[len(best)],)
        if alias in reexports:
            return resolve(reexports[alias] + path[len(best) + 1 :], depth + 1)
    return best


edges = {}  # file -> {file: example path}
parsed = {}
for mod, rel in files.items():
    src = strip_comments((root / rel).read_text())
    spans = inline_mod_spans(src)
    depth = lambda pos: sum(1 for a, b in spans if a < pos < b)
    if NO_TESTS:
        starts = {a: b for a, b in spans}
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(mod\s+\w+\s*\{)", src):
            end = starts.get(m.start(1))
            if end is not None:
                src = src[: m.start()] + " " * (end + 1 - m.start()) + src[end + 1 :]
        spans = inline_mod_spans(src)
    uses = []
    for m in re.finditer(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", src):
        for p in use_paths(m.group(2)):
            uses.append((bool(m.group(1)), p, depth(m.start())))
    inline = [
        (tuple(re.split(r"\s*::\s*", m.group(0))), depth(m.start()))
        for m in re.finditer(r"\b(?:crate|super)(?:\s*::\s*\w+)+", src)
    ]
    parsed[mod] = (uses, inline)
    for public, p, d in uses:
        a = absolute(mod, p, d)
        if public and a is not None and a in files:
            reexports[mod + (p[-1],)] = a

for mod, rel in files.items():
    uses, inline = parsed[mod]
    out = edges.setdefault(rel, {})
    if mod == ():
        continue  # lib.rs: the module list
    for p, d in [(p, d) for _, p, d in uses] + inline:
        a = absolute(mod, p, d)
        if a is None:
            continue
        target = files[resolve(a)]
        if target != rel:
            out.setdefault(target, "::".join(p))

# Tarjan's strongly connected components.
index, low, stack, on, sccs = {}, {}, [], set(), []


def strong_in(graph, v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in graph.get(v, {}):
        if w not in index:
            strong_in(graph, w)
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
        if len(comp) > 1:
            sccs.append(sorted(comp))


sys.setrecursionlimit(10000)
mod_of_file = {rel: mod for mod, rel in files.items()}

# The same graph between modules: an edge from a file of module a to a file
# of module b is an edge between the two siblings under their common parent
# that hold them (commands -> serve for commands/mod.rs -> serve/mod.rs); an edge
# between a module and one of its own descendants is left out.
medges = {}
for f, outs in edges.items():
    a = mod_of_file[f]
    for t, why in outs.items():
        b = mod_of_file[t]
        n = min(len(a), len(b))
        if a[:n] == b[:n]:
            continue
        k = next(i for i in range(n) if a[i] != b[i])
        ka, kb = "/".join(a[: k + 1]), "/".join(b[: k + 1])
        medges.setdefault(ka, {}).setdefault(kb, []).append(f"{f} -> {t} ({why})")

index, low, stack, on, sccs = {}, {}, [], set(), []
for v in sorted(medges):
    if v not in index:
        strong_in(medges, v)

bad = 0
for comp in sccs:
    bad += 1
    print(f"circle: {', '.join(comp)}")
    for m in comp:
        for t, whys in sorted(medges[m].items()):
            if t in comp:
                for w in whys:
                    print(f"  {m} -> {t}: {w}")
if not bad:
    print(f"no import circle between the modules of {root} (other than a module and its own children)")
sys.exit(1 if bad else 0)
