#!/usr/bin/env python3
"""Checks that imports run one way between the crate's modules.

    python3 api/imports.py              # exit 1 naming each cycle, if there is one
    python3 api/imports.py --graph      # print the edges too
    python3 api/imports.py --self-test  # the checker on made-up crates

Reads every `crate::…`, `super::…` and `self::…` path in `src/**/*.rs`
(and, each package a crate of its own, in `integrations/*/src/**/*.rs`
and `checker/src/**/*.rs`)
(`use` trees included; comments and string literals skipped, so a doc
link is no import), resolves it to the module it names, and builds a
graph for every module that has children, at every level: one between the
crate's top-level modules, one between the children of `transport`, one
between those of `transport::http`, of `transport::http::client`, and so
on. An import from `a::b::c` into `a::d::e` is the edge `b -> d` of the
graph of `a`'s children; a module importing its own ancestor or
descendant makes no edge. A path through a name a module imports (the
crate root's `crate::Cancellation`, a parent's `super::Event`) counts as
an import of the module the name comes from. Test code counts too: a
test module that imports a module above its own is a cycle like any
other. Standard library only.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def strip(code: str) -> str:
    """`code` without comments, string and char literals (kept: newlines,
    so that line numbers still hold, and lifetimes)."""
    out = []
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            i = n if j < 0 else j
        elif code.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if code.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif code.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if code[i] == "\n" else "")
                    i += 1
        elif (m := re.match(r'b?r(#*)"', code[i:])) and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            end = code.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append("\n" * code.count("\n", i, end) + '""')
            i = end
        elif c == '"':
            j = i + 1
            while j < n and code[j] != '"':
                j += 2 if code[j] == "\\" else 1
            out.append("\n" * code.count("\n", i, j) + '""')
            i = j + 1
        elif c == "'" and (m := re.match(r"'(\\.[^']*|[^\\'])'", code[i:])):
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(src: pathlib.Path, path: pathlib.Path) -> list[str]:
    """The module path of a source file: `src/a/b.rs` and `src/a/b/mod.rs` → [a, b]."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return parts


def use_paths(tree: str, keep_alias: bool = False) -> list[str]:
    """The paths of a `use` tree: `a::{b, c::{d as e}}` → a::b, a::c::d
    (with `keep_alias`: a::b, a::c::d as e)."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+(\w+)", r"@\1", tree))
    out = []

    def walk(prefix: str, t: str) -> None:
        depth, start, items = 0, 0, []
        for k, ch in enumerate(t):
            depth += ch == "{"
            depth -= ch == "}"
            if ch == "," and depth == 0:
                items.append(t[start:k])
                start = k + 1
        items.append(t[start:])
        for item in filter(None, items):
            if "{" in item:
                head, rest = item.split("{", 1)
                walk(prefix + head, rest[: rest.rfind("}")])
            else:
                path, _, alias = (prefix + item).partition("@")
                out.append(f"{path} as {alias}" if keep_alias and alias else path)

    walk("", tree)
    return out


PATH = re.compile(r"(?<![\w:])(crate|super|self)((?:::(?:r#)?\w+)+)")
USE = re.compile(r"\buse\s+([^;]*);")
INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*\{")


def references(code: str):
    """(line, scope, path) for each path in `code`; `scope` is the inline
    modules (`mod tests { … }`) the path sits in."""
    spans = inline_spans(code)

    def scope(pos: int) -> list[str]:
        return [name for s, e, name in spans if s <= pos <= e]

    used = []
    for m in USE.finditer(code):
        line = code.count("\n", 0, m.start()) + 1
        for p in use_paths(m.group(1)):
            if re.match(r"(crate|super|self)(::|$)", p):
                used.append((line, scope(m.start()), p))
    use_spans = [(m.start(), m.end()) for m in USE.finditer(code)]
    for m in PATH.finditer(code):
        if any(s <= m.start() < e for s, e in use_spans):
            continue
        line = code.count("\n", 0, m.start()) + 1
        used.append((line, scope(m.start()), m.group(1) + m.group(2)))
    return used


def resolve(module: list[str], path: str) -> list[str]:
    """The absolute module path (from the crate root) a path names."""
    parts = [p.removeprefix("r#") for p in path.split("::")]
    here = list(module)
    if parts[0] == "crate":
        here, parts = [], parts[1:]
    while parts and parts[0] in ("self", "super"):
        if parts[0] == "super":
            here = here[:-1]
        parts = parts[1:]
    return here + parts


def use_items(tree: str) -> list[tuple[str, str]]:
    """(path, name it binds) for each path of a `use` tree: `a::{b as c,
    d::self}` → (a::b, c), (a::d, d)."""
    out = []
    for p in use_paths(tree, keep_alias=True):
        path, _, alias = p.partition(" as ")
        parts = path.split("::")
        if parts[-1] == "self":
            parts.pop()
        if parts[-1] == "*":
            continue
        out.append(("::".join(parts), alias or parts[-1]))
    return out


class Crate:
    """The modules of a crate (from its files) and the names each module
    file imports, so that a path through an imported name (`crate::X`,
    `super::X`, re-exported or imported by a parent) is followed to the
    module it comes from."""

    def __init__(self, src: pathlib.Path, files: list[pathlib.Path]):
        self.modules = {tuple(module_of(src, f)) for f in files}
        # A module's ancestors exist even without a file of their own.
        for m in list(self.modules):
            self.modules |= {m[:k] for k in range(len(m))}
        self.names: dict[tuple, dict[str, list[str]]] = {}
        for f in files:
            mod = tuple(module_of(src, f))
            code = strip(f.read_text())
            names = self.names.setdefault(mod, {})
            spans = inline_spans(code)
            for m in USE.finditer(code):
                if any(s <= m.start() <= e for s, e, _ in spans):
                    continue  # an inline module's import binds nothing here
                for path, name in use_items(m.group(1)):
                    head = path.split("::")[0]
                    if head in ("crate", "self", "super"):
                        names[name] = resolve(list(mod), path)
                    elif mod + (head,) in self.modules:
                        names[name] = list(mod) + path.split("::")
                    # else: another crate's path.

    def locate(self, target: list[str], depth: int = 0) -> tuple:
        """The module an absolute path falls in: its longest prefix that is
        a module, following a name a module imports to where it comes from."""
        mod: tuple = ()
        for k, part in enumerate(target):
            if mod + (part,) in self.modules:
                mod += (part,)
                continue
            origin = self.names.get(mod, {}).get(part)
            if origin is not None and depth < 16 and origin[: len(mod) + 1] != list(mod) + [part]:
                return self.locate(origin + target[k + 1 :], depth + 1)
            break
        return mod


def inline_spans(code: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each inline module (`mod tests { … }`), by its
    brace span, outermost first."""
    spans = []
    for m in INLINE_MOD.finditer(code):
        depth, k = 0, m.end() - 1
        while k < len(code):
            depth += code[k] == "{"
            depth -= code[k] == "}"
            if depth == 0:
                break
            k += 1
        spans.append((m.start(), k, m.group(1)))
    return spans


def edge(src: tuple, dst: tuple):
    """The graph (the module whose children they are) and the edge between
    two of its children that an import from `src` into `dst` makes; None
    when one module is the other or its ancestor."""
    k = 0
    while k < min(len(src), len(dst)) and src[k] == dst[k]:
        k += 1
    if k == len(src) or k == len(dst):
        return None
    return src[:k], src[k], dst[k]


def cycles(edges: dict[str, dict[str, list[str]]]) -> list[tuple[list[str], list[str]]]:
    """Each group of modules that import each other (a strongly connected
    component, by Tarjan's algorithm), with one cycle through it."""
    nodes = sorted(set(edges) | {m for e in edges.values() for m in e})
    index, low, on_stack, stack, groups = {}, {}, set(), [], []

    def connect(n: str) -> None:
        index[n] = low[n] = len(index)
        stack.append(n)
        on_stack.add(n)
        for m in sorted(edges.get(n, {})):
            if m not in index:
                connect(m)
                low[n] = min(low[n], low[m])
            elif m in on_stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            group = []
            while True:
                m = stack.pop()
                on_stack.discard(m)
                group.append(m)
                if m == n:
                    break
            if len(group) > 1:
                groups.append(set(group))

    for n in nodes:
        if n not in index:
            connect(n)
    return [(sorted(g), shortest_cycle(edges, min(g), g)) for g in groups]


def shortest_cycle(edges, start: str, group: set[str]) -> list[str]:
    """The shortest cycle through `start` within `group` (breadth first)."""
    paths, seen = [[start]], {start}
    while paths:
        nxt = []
        for path in paths:
            for m in sorted(edges.get(path[-1], {})):
                if m == start:
                    return path + [start]
                if m in group and m not in seen:
                    seen.add(m)
                    nxt.append(path + [m])
        paths = nxt
    return [start, start]


def check(src: pathlib.Path, show_graph: bool = False, out=sys.stderr) -> int:
    """0 when the modules under `src` import one way; 1, naming each cycle, if not."""
    files = sorted(src.rglob("*.rs"))
    crate = Crate(src, files)

    # One graph per module with children: the edges between its children.
    graphs: dict[tuple, dict[str, dict[str, list[str]]]] = {}
    for f in files:
        mod = module_of(src, f)
        if not mod:
            continue
        code = strip(f.read_text())
        for line, scope, path in references(code):
            e = edge(tuple(mod), crate.locate(resolve(mod + scope, path)))
            if e is None:
                continue
            parent, a, b = e
            where = f"{f.relative_to(src.parent)}:{line}: {path}"
            graphs.setdefault(parent, {}).setdefault(a, {}).setdefault(b, []).append(where)

    status = 0
    for parent in sorted(graphs):
        edges = graphs[parent]
        name = "::".join(parent) + "::*" if parent else "top-level modules"
        if show_graph:
            print(f"# {name}")
            for a in sorted(edges):
                print(f"{a} -> {', '.join(sorted(edges[a]))}")
        for group, cycle in cycles(edges):
            status = 1
            print(f"import cycle among {name} {{{', '.join(group)}}}, e.g. {' -> '.join(cycle)}", file=out)
            for a, b in zip(cycle, cycle[1:]):
                for where in edges[a][b][:3]:
                    print(f"  {a} -> {b}  {where}", file=out)
    return status


def self_test() -> int:
    """The checker on small made-up crates: it must find each cycle, and
    nothing where there is none."""
    import io
    import tempfile

    cases = [
        # (expected status, {file: text})
        (1, {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;", "b.rs": "use crate::{c, a::{Y as Z}};"}),
        (1, {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;", "b/mod.rs": "mod c;", "b/c.rs": "use super::super::a::Y;"}),
        (1, {"lib.rs": "mod a; mod b; pub use a::Y;", "a.rs": "fn f() { crate::b::g() }", "b.rs": "fn g() -> crate::Y {}"}),
        (1, {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;", "b.rs": "#[cfg(test)] mod tests { use crate::a::*; }"}),
        (1, {"lib.rs": "mod transport;", "transport/mod.rs": "mod http; mod stdio;",
             "transport/http.rs": "use super::stdio::X;", "transport/stdio.rs": "use crate::transport::http::Y;"}),
        # A circle three levels down, and one through a name a parent imports.
        (1, {"lib.rs": "mod t;", "t/mod.rs": "mod h;", "t/h/mod.rs": "mod c;", "t/h/c/mod.rs": "mod era; mod request;",
             "t/h/c/era.rs": "use super::request::send;", "t/h/c/request.rs": "use super::era::{NotModern, is_modern};"}),
        (1, {"lib.rs": "mod u;", "u/mod.rs": "mod probe; mod recorder; pub use probe::Guard; pub use recorder::Event as E;",
             "u/probe.rs": "use super::E;", "u/recorder.rs": "fn f() -> super::Guard {}"}),
        # Doc links, comments and strings are no imports; one-way imports are fine.
        (0, {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;",
             "b.rs": '/// [`Y`](crate::a::Y)\n// crate::a::Y\n/* crate::a::Y */ const S: &str = "crate::a::Y";'}),
        (0, {"lib.rs": "mod transport;", "transport/mod.rs": "mod http; mod stdio;",
             "transport/http.rs": "use super::stdio::X;", "transport/stdio.rs": "mod tests { use super::*; }"}),
        # A module and its ancestors import each other freely; a parent's
        # name taken from a child is that child's.
        (0, {"lib.rs": "mod t;", "t/mod.rs": "mod h; use h::c::X; struct Inner;", "t/h/mod.rs": "mod c;",
             "t/h/c/mod.rs": "mod era; mod request; use super::super::Inner;",
             "t/h/c/era.rs": "use super::request::send; use crate::t::X;", "t/h/c/request.rs": "use super::super::super::Inner;"}),
    ]
    failed = 0
    for k, (expected, tree) in enumerate(cases):
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp) / "src"
            for name, text in tree.items():
                (src / name).parent.mkdir(parents=True, exist_ok=True)
                (src / name).write_text(text)
            got = check(src, out=io.StringIO())
        if got != expected:
            failed += 1
            print(f"self-test case {k}: exit {got}, expected {expected}", file=sys.stderr)
    print(f"self-test: {len(cases) - failed}/{len(cases)} cases pass")
    return int(failed > 0)


def sources() -> list[pathlib.Path]:
    """The `src/` of every package of the workspace: the crate's own, then
    each integration's and the checker's."""
    others = sorted(ROOT.glob("integrations/*/src")) + sorted(ROOT.glob("checker/src"))
    return [SRC] + [p for p in others if p.is_dir()]


def main() -> int:
    if "--self-test" in sys.argv:
        return self_test()
    status = 0
    for src in sources():
        if "--graph" in sys.argv:
            print(f"## {src.relative_to(ROOT)}")
        status |= check(src, show_graph="--graph" in sys.argv)
    return status


if __name__ == "__main__":
    sys.exit(main())
