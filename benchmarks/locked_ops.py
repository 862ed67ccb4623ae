#!/usr/bin/env python3
"""Atomic read-modify-writes per call of the layers (figure 2's profile).

Counts the x86-64 instructions with a `lock` prefix (and `xchg` with a
memory operand, locked implicitly) that one call of a stack executes, per
function, with callgrind: the difference between runs of N and 2N calls of
`benches/layers.rs` in its `LAYERS_PROFILE` mode, so that setup cancels
out. Needs valgrind and objdump (binutils).

    cargo bench --bench layers --no-run
    python3 benchmarks/locked_ops.py target/release/deps/layers-<hash> [tower full ...]
"""

import collections
import os
import re
import subprocess
import sys
import tempfile

CALLS = 100_000
LOCKED = re.compile(r"^\s*([0-9a-f]+):\s+(lock |xchg\s+\S*\()")


def locked_addresses(binary):
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", binary],
        check=True, capture_output=True, text=True,
    ).stdout
    return {int(m.group(1), 16) for m in map(LOCKED.match, out.splitlines()) if m}


def profile(binary, stack, calls, out):
    env = dict(os.environ, LAYERS_PROFILE=f"{stack}:{calls}")
    subprocess.run(
        ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
         "--compress-strings=no", f"--callgrind-out-file={out}", binary],
        check=True, env=env, capture_output=True,
    )


def locked_costs(path, binary, locked):
    """Executions of each locked instruction of `binary`, by function."""
    costs = collections.Counter()
    obj = fn = None
    after_call = False
    name = os.path.basename(binary)
    with open(path) as f:
        for line in f:
            if line.startswith("ob="):
                obj = line[3:].strip()
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the callee's, inclusive
            elif line.startswith("0x"):
                if after_call:
                    after_call = False
                    continue
                addr, _line, *count = line.split()
                if obj and obj.endswith(name) and int(addr, 16) in locked:
                    costs[fn] += int(count[0]) if count else 0
    return costs


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary, stacks = sys.argv[1], sys.argv[2:] or ["tower", "full"]
    locked = locked_addresses(binary)
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stacks:
            runs = []
            for calls in (CALLS, 2 * CALLS):
                out = os.path.join(tmp, f"{stack}.{calls}")
                profile(binary, stack, calls, out)
                runs.append(locked_costs(out, binary, locked))
            per_call = {fn: (runs[1][fn] - runs[0][fn]) / CALLS for fn in runs[1]}
            total = sum(per_call.values())
            print(f"{stack}: {total:.1f} locked instructions per call")
            for fn, n in sorted(per_call.items(), key=lambda kv: -kv[1]):
                if n >= 0.01:
                    print(f"  {n:5.2f}  {fn[:110]}")


if __name__ == "__main__":
    main()
