#!/usr/bin/env python3
"""Writes the public API of each package, one line per item, from rustdoc's HTML.

    python3 api/generate.py          # rewrite api/<package>.txt
    python3 api/generate.py --check  # exit 1 if a list differs from the code (CI)

Stable Rust only: it reads the pages `cargo doc --workspace --no-deps
--all-features` writes (all.html, then each item's page for its inherent methods, trait
methods, enum variants and public fields), so every change of the public
API shows as a diff of a checked-in text file in review.
"""
import html
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# (package name, crate name as rustdoc writes it)
PACKAGES = [
    ("tower-mcp-cancel", "tower_mcp_cancel"),
    ("tower-mcp-cancel-rmcp", "tower_mcp_cancel_rmcp"),
    ("tower-mcp-cancel-tower-mcp", "tower_mcp_cancel_tower_mcp"),
    ("tower-mcp-cancel-redis", "tower_mcp_cancel_redis"),
]

KINDS = {
    "structs": "struct", "enums": "enum", "traits": "trait", "functions": "fn",
    "types": "type", "constants": "const", "macros": "macro", "unions": "union",
    "statics": "static", "derives": "derive", "attributes": "attr", "trait-aliases": "trait alias",
}


def members(page: str, kind: str) -> list[str]:
    """Inherent methods, trait items, variants and fields named on an item's page."""
    out = []
    if kind in ("struct", "enum", "union"):
        start = page.find('id="implementations"')
        stop = min((i for i in (page.find('id="trait-implementations"'),
                                page.find('id="synthetic-implementations"'),
                                page.find('id="blanket-implementations"')) if i >= 0),
                   default=len(page))
        fields = re.findall(r'id="(?:structfield|variant)\.([A-Za-z0-9_]+)"', page)
        out += [f"variant/field {f}" for f in dict.fromkeys(fields)]
        if start >= 0:
            inherent = page[start:stop]
            for m in dict.fromkeys(re.findall(r'id="(method|associatedconstant)\.([A-Za-z0-9_]+)"', inherent)):
                out.append(f"{'fn' if m[0] == 'method' else 'const'} {m[1]}")
    elif kind == "trait":
        # The trait's own items end where its implementations begin (on
        # foreign types, then implementors); those repeat the method names.
        stop = min((i for i in (page.find('id="foreign-impls"'), page.find('id="implementors"'))
                    if i >= 0), default=len(page))
        kinds = {"tymethod": "fn", "method": "fn", "associatedtype": "type",
                 "associatedconstant": "const"}
        found = re.findall(r'id="(tymethod|method|associatedtype|associatedconstant)\.([A-Za-z0-9_]+)"',
                           page[:stop])
        out += dict.fromkeys(f"{kinds[k]} {name}" for k, name in found)
    return out


def target_dir() -> pathlib.Path:
    """Where cargo writes (CARGO_TARGET_DIR or .cargo/config.toml honoured)."""
    meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                          cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return pathlib.Path(json.loads(meta)["target_directory"])


def api(crate: str) -> list[str]:
    doc = target_dir() / "doc" / crate
    index = (doc / "all.html").read_text()
    lines = []
    for section, items in re.findall(r'<h3 id="([a-z-]+)">[^<]*</h3><ul class="all-items">(.*?)</ul>', index, re.S):
        kind = KINDS.get(section, section)
        for href, name in re.findall(r'<a href="([^"]+)">([^<]+)</a>', items):
            name = html.unescape(name)
            lines.append(f"{kind} {name}")
            for member in members((doc / href).read_text(), kind):
                lines.append(f"    {member}")
    return lines


def main() -> int:
    check = "--check" in sys.argv[1:]
    subprocess.run(["cargo", "doc", "--workspace", "--no-deps", "--all-features", "--quiet"], cwd=ROOT, check=True)
    status = 0
    for package, crate in PACKAGES:
        lines = api(crate)
        items = sum(1 for l in lines if not l.startswith(" "))
        fns = sum(1 for l in lines if l.startswith("    fn "))
        text = f"# public API of {package}: {items} items, {fns} methods (python3 api/generate.py)\n" + "\n".join(lines) + "\n"
        path = ROOT / "api" / f"{package}.txt"
        if check:
            old = path.read_text() if path.exists() else ""
            if old != text:
                print(f"api/{package}.txt is not the public API of the code: run `python3 api/generate.py` and review the diff", file=sys.stderr)
                subprocess.run(["diff", "-u", str(path), "-"], input=text, text=True)
                status = 1
        else:
            path.write_text(text)
        print(f"{package}: {items} public items, {fns} public methods")
    return status


if __name__ == "__main__":
    sys.exit(main())
