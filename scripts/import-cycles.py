#!/usr/bin/env python3
"""Import circles between the modules of each crate (issue 32, point 3).

Builds, for every crate under `crates/`, the graph "module A names an item of
module B" from the paths in its sources (`use crate::...`, `use super::...`,
`use self::...`, and the same paths written inline in code), then prints the
cycles: every strongly connected component of more than one module, with its
members and the edges that close it.

Rules, kept simple on purpose:
- A module is a file: `src/lib.rs`/`src/main.rs` is the crate root, `a.rs`
  and `a/mod.rs` are `a`, `a/b.rs` is `a::b`. Inline `mod x { ... }` blocks
  (the `tests` modules) count as their file, so `use super::*` in a unit test
  is no edge. Files of `src/bin/` are separate roots and skipped; so are
  `tests/`, `benches/` and `examples/`, and test code inside `src/`: an
  inline module gated by `#[cfg(test)]` (its paths are dropped) and a file
  whose `mod` line is gated by it (a test fixture), since tests may use
  the whole crate and no build but a test's contains them.
- A path resolves to the longest module prefix it names (`crate::a::b::C` is
  `a::b` when `a/b.rs` exists, else `a`). A path that stops at a module
  which re-exports the name (`pub use x::C;` in the root or in a `mod.rs`) is
  followed to where the name is defined, so `use crate::C` through the root's
  re-export is an edge to the defining module, not to the root.
- A parent naming its own child through a relative path (`child::C` in
  `a/mod.rs`) is an edge too, but a `mod child;` declaration alone is not.
- Edges to the module itself are dropped, and so are edges between a module
  and its own ancestors (the crate root, `a` for `a::b`), since a parent owns
  its children and a child may use what its parent declares; `--all` keeps
  them.

Reported per crate: each strongly connected component of two or more modules
(its members), the mutual pairs in it (`a <-> b`), and the number of
elementary cycles in it (capped at 10,000).

Usage: scripts/import-cycles.py [--all] [--edges] [CRATE_DIR...]
(default: every crates/*). Exit status 0; `--edges` also prints every edge, `-v`
the edges inside each circle.
"""

from __future__ import annotations

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def module_of(src: str, path: str) -> tuple[str, ...]:
    rel = os.path.relpath(path, src)[: -len(".rs")]
    parts = rel.split(os.sep)
    if parts in (["lib"], ["main"]):
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def strip_comments_and_strings(text: str) -> str:
    # Drop // comments (doc comments included) and block comments, then string
    # and char literals, so paths in docs or strings are not counted.
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'r#*"(?:.|\n)*?"#*', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def strip_test_modules(text: str) -> str:
    """Removes every `#[cfg(test)] mod name { ... }` block (brace-matched;
    run after comments and strings are gone)."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\](?:\s*#\[[^\]]*\])*\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append(text[i : m.start()])
        i = j
    out.append(text[i:])
    return "".join(out)


def test_only_children(text: str) -> set[str]:
    """The names of `#[cfg(test)] mod name;` declarations."""
    return set(re.findall(r"#\[cfg\(test\)\](?:\s*#\[[^\]]*\])*\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text))


def expand_use_tree(tree: str) -> list[str]:
    """`a::{b, c::{d, e as f}, self}` -> ['a::b', 'a::c::d', 'a::c::e', 'a']."""
    tree = re.sub(r"\s+", "", tree)

    def split_top(s: str) -> list[str]:
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
        if cur:
            out.append(cur)
        return out

    def go(prefix: str, s: str) -> list[str]:
        s = re.sub(r"as\w+$", "", s) if re.search(r"\bas\b", s) else s
        i = s.find("{")
        if i < 0:
            s = re.sub(r"(?<=\w)as[A-Za-z_]\w*$", "", s)
            if s in ("self", ""):
                return [prefix.rstrip(":")] if prefix else []
            return [prefix + s]
        head, body = s[:i], s[i + 1 : s.rindex("}")]
        res = []
        for item in split_top(body):
            res.extend(go(prefix + head, item))
        return res

    return go("", tree)


class Crate:
    def __init__(self, crate_dir: str):
        self.name = os.path.basename(crate_dir.rstrip("/"))
        self.src = os.path.join(crate_dir, "src")
        self.files: dict[tuple[str, ...], str] = {}
        for dirpath, dirnames, filenames in os.walk(self.src):
            rel = os.path.relpath(dirpath, self.src)
            if rel.split(os.sep)[0] == "bin":
                dirnames[:] = []
                continue
            for f in filenames:
                if f.endswith(".rs"):
                    p = os.path.join(dirpath, f)
                    self.files[module_of(self.src, p)] = p
        self.text = {
            m: strip_comments_and_strings(open(p, encoding="utf-8").read())
            for m, p in self.files.items()
        }
        test_only = {
            m + (child,) for m, t in self.text.items() for child in test_only_children(t)
        }
        for m in list(self.files):
            if any(m[: len(t)] == t for t in test_only):
                del self.files[m]
                del self.text[m]
        self.text = {m: strip_test_modules(t) for m, t in self.text.items()}
        self.children = defaultdict(set)
        for m in self.files:
            if m:
                self.children[m[:-1]].add(m[-1])
        # name re-exported by a module -> the absolute path it comes from
        self.reexports: dict[tuple[str, ...], dict[str, list[str]]] = {}
        for m, t in self.text.items():
            table: dict[str, list[str]] = {}
            for tree in re.findall(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", t):
                for p in expand_use_tree(tree):
                    segs = p.split("::")
                    absolute = self.absolutize(m, segs)
                    if absolute is not None and segs[-1] != "*":
                        table[segs[-1]] = absolute
            self.reexports[m] = table

    def absolutize(self, m: tuple[str, ...], segs: list[str]) -> list[str] | None:
        """The path from the crate root, or None when it leaves the crate."""
        if not segs:
            return None
        head = segs[0]
        if head == "crate":
            return segs[1:]
        if head == "self":
            return list(m) + segs[1:]
        if head == "super":
            base = list(m)
            i = 0
            while i < len(segs) and segs[i] == "super":
                if not base:
                    return None
                base.pop()
                i += 1
            return base + segs[i:]
        if head in self.children.get(m, ()):  # relative path to a child
            return list(m) + segs
        return None

    def resolve(self, path: list[str], depth: int = 0) -> tuple[str, ...] | None:
        """The module that defines what `path` (from the root) names."""
        best = ()
        for i in range(len(path), -1, -1):
            if tuple(path[:i]) in self.files:
                best = tuple(path[:i])
                break
        rest = path[len(best) :]
        if rest and depth < 8:
            table = self.reexports.get(best, {})
            if rest[0] in table:
                target = self.resolve(table[rest[0]] + rest[1:], depth + 1)
                if target is not None:
                    return target
        return best

    def edges(self, keep_ancestors: bool = False) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
        graph: dict[tuple[str, ...], set[tuple[str, ...]]] = defaultdict(set)
        for m, t in self.text.items():
            paths: list[str] = []
            for tree in re.findall(r"\buse\s+([^;]+);", t):
                paths.extend(expand_use_tree(tree))
            # inline paths in code: crate::a::b, super::x, self::x::y
            paths.extend(
                re.findall(r"(?<![\w:])((?:crate|super|self)(?:::(?:super|\w+))+)", t)
            )
            # relative paths to a child module written inline: child::Item
            for child in self.children.get(m, ()):
                paths.extend(re.findall(rf"(?<![\w:])({re.escape(child)}::\w+)", t))
            for p in paths:
                segs = [s for s in p.split("::") if s]
                if not segs or segs[-1] == "*" and len(segs) == 1:
                    continue
                absolute = self.absolutize(m, [s for s in segs if s != "*"])
                if absolute is None:
                    continue
                target = self.resolve(absolute)
                if target is None or target == m:
                    continue
                related = target[: len(m)] == m or m[: len(target)] == target
                if related and not keep_ancestors:
                    continue
                graph[m].add(target)
        return graph


def sccs(graph, nodes):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return [c for c in out if len(c) > 1]


def elementary_cycles(graph, members, cap=10000):
    """Counts the elementary cycles inside one component (Johnson-style DFS
    from each start node over nodes ordered after it), stopping at `cap`."""
    order = sorted(members)
    rank = {v: i for i, v in enumerate(order)}
    count = 0
    for s in order:
        stack = [(s, iter(sorted(w for w in graph.get(s, ()) if w in members)))]
        on_path = {s}
        while stack:
            v, it = stack[-1]
            advanced = False
            for w in it:
                if w == s:
                    count += 1
                    if count >= cap:
                        return count
                elif w not in on_path and rank[w] > rank[s]:
                    on_path.add(w)
                    stack.append(
                        (w, iter(sorted(x for x in graph.get(w, ()) if x in members)))
                    )
                    advanced = True
                    break
            if not advanced:
                stack.pop()
                on_path.discard(v)
    return count


def name(m: tuple[str, ...]) -> str:
    return "::".join(m) if m else "crate"


def main(argv: list[str]) -> int:
    show_edges = "--edges" in argv
    keep_ancestors = "--all" in argv
    verbose = "-v" in argv
    dirs = [a for a in argv if not a.startswith("-")]
    if not dirs:
        base = os.path.join(ROOT, "crates")
        dirs = sorted(
            os.path.join(base, d)
            for d in os.listdir(base)
            if os.path.isdir(os.path.join(base, d, "src"))
        )
    total = 0
    for d in dirs:
        crate = Crate(d)
        graph = crate.edges(keep_ancestors)
        comps = sccs(graph, set(crate.files))
        total += len(comps)
        print(f"{crate.name}: {len(comps)} circle(s), {len(crate.files)} modules")
        for comp in comps:
            members = set(comp)
            n = elementary_cycles(graph, members)
            print(f"  circle of {len(members)} modules, {n} elementary cycle(s): "
                  f"[{', '.join(sorted(name(c) for c in comp))}]")
            pairs = sorted(
                f"{name(a)} <-> {name(b)}"
                for a in members
                for b in graph.get(a, ())
                if b in members and a in graph.get(b, ()) and name(a) < name(b)
            )
            for p in pairs:
                print(f"      {p}")
            if verbose:
                for a in sorted(members):
                    for b in sorted(graph.get(a, ())):
                        if b in members:
                            print(f"      {name(a)} -> {name(b)}")
        if show_edges:
            for a in sorted(graph):
                for b in sorted(graph[a]):
                    print(f"    edge {name(a)} -> {name(b)}")
    print(f"total: {total} circle(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
