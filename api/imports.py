#!/usr/bin/env python3
"""Checks that imports run one way between the crate's modules.

    python3 api/imports.py              # exit 1 naming each cycle, if there is one
    python3 api/imports.py --graph      # print the edges too
    python3 api/imports.py --self-test  # the checker on made-up crates

Reads every `crate::…`, `super::…` and `self::…` path in `src/**/*.rs`
(`use` trees included; comments and string literals skipped, so a doc
link is no import), resolves it to the module it names, and builds two
graphs: one between the crate's top-level modules, and one between the
children of each module in NESTED (`transport`: `call`, `stdio`, `http`).
A path through a name the crate root re-exports (`crate::Cancellation`)
counts as an import of the module the root takes it from. Test code
counts too: a test module that imports a module above its own is a
cycle like any other. Standard library only.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
# Modules whose children get a graph of their own.
NESTED = ["transport"]


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


def use_paths(tree: str) -> list[str]:
    """The paths of a `use` tree: `a::{b, c::{d as e}}` → a::b, a::c::d."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))
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
                out.append(prefix + item)

    walk("", tree)
    return out


PATH = re.compile(r"(?<![\w:])(crate|super|self)((?:::(?:r#)?\w+)+)")
USE = re.compile(r"\buse\s+([^;]*);")
INLINE_MOD = re.compile(r"\bmod\s+(\w+)\s*\{")


def references(code: str):
    """(line, scope, path) for each path in `code`; `scope` is the inline
    modules (`mod tests { … }`) the path sits in."""
    # Inline modules by their brace span.
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

    def scope(pos: int) -> list[str]:
        return [name for s, e, name in sorted(spans) if s <= pos <= e]

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


def root_reexports(lib: str) -> dict[str, str]:
    """Names the crate root re-exports, by the top-level module they come from."""
    names = {}
    for m in USE.finditer(lib):
        for p in use_paths(m.group(1)):
            parts = p.split("::")
            if parts[0] == "crate":
                parts = parts[1:]
            if len(parts) >= 2:
                names[parts[-1]] = parts[0]
    return names


def node(target: list[str], top: set[str], nested: dict[str, set[str]], reexports: dict[str, str]):
    """The (top-level, child) a resolved path falls in; None for a path out
    of the crate's modules (`crate::SomeMacro!`, a std path after `self`)."""
    if not target:
        return None
    head = target[0]
    if head not in top:
        head = reexports.get(head)
        if head is None:
            return None
        return head, None
    child = target[1] if len(target) > 1 and target[1] in nested.get(head, ()) else None
    return head, child


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
    modules = {f: module_of(src, f) for f in files}
    top = {m[0] for m in modules.values() if m}
    nested = {t: {m[1] for m in modules.values() if len(m) > 1 and m[0] == t} for t in NESTED}
    lib = src / "lib.rs"
    reexports = root_reexports(strip(lib.read_text())) if lib.exists() else {}

    graphs = {"top-level modules": {}, **{f"{t}::*": {} for t in NESTED}}
    for f in files:
        mod = modules[f]
        if not mod:
            continue
        code = strip(f.read_text())
        src_node = node(mod, top, nested, reexports)
        for line, scope, path in references(code):
            dst = node(resolve(mod + scope, path), top, nested, reexports)
            if dst is None:
                continue
            where = f"{f.relative_to(src.parent)}:{line}: {path}"
            if src_node[0] != dst[0]:
                graphs["top-level modules"].setdefault(src_node[0], {}).setdefault(dst[0], []).append(where)
            elif src_node[0] in NESTED and src_node[1] and dst[1] and src_node[1] != dst[1]:
                g = graphs[f"{src_node[0]}::*"]
                g.setdefault(src_node[1], {}).setdefault(dst[1], []).append(where)

    status = 0
    for name, edges in graphs.items():
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
        # Doc links, comments and strings are no imports; one-way imports are fine.
        (0, {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::X;",
             "b.rs": '/// [`Y`](crate::a::Y)\n// crate::a::Y\n/* crate::a::Y */ const S: &str = "crate::a::Y";'}),
        (0, {"lib.rs": "mod transport;", "transport/mod.rs": "mod http; mod stdio;",
             "transport/http.rs": "use super::stdio::X;", "transport/stdio.rs": "mod tests { use super::*; }"}),
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


def main() -> int:
    if "--self-test" in sys.argv:
        return self_test()
    return check(SRC, show_graph="--graph" in sys.argv)


if __name__ == "__main__":
    sys.exit(main())
