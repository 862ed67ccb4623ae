#!/usr/bin/env python3
"""Instructions and atomic read-modify-writes per request of an HTTP server
under figure 8's load (BENCHMARKS.md), with callgrind.

Starts SERVER (`--listen 127.0.0.1:0`, it prints `listening on URL`) under
`valgrind --tool=callgrind`, warms it with 2 000 echo calls from h2load,
zeroes the counters, drives N more and divides: the instructions the whole
process executes per request, and its locked instructions (x86-64 `lock`
prefix and `xchg` with memory, counted in SERVER's own code) per request and
per function. Needs valgrind, callgrind_control, objdump and h2load.

    python3 benchmarks/http_profile.py SERVER 1.1|2 [N] [TOP]

TOP (default 0) also lists the functions with the most instructions.
The HTTP/1.1 load is `-c 64 -m 1`, the HTTP/2 load `-c 4 -m 16`, as figure 8.
"""
import collections, os, re, shutil, signal, subprocess, sys, tempfile, time

LOCKED = re.compile(r"^\s*([0-9a-f]+):\s+(lock |xchg\s+\S*\()")

def locked_addresses(binary):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary], check=True, capture_output=True, text=True).stdout
    return {int(m.group(1), 16) for m in map(LOCKED.match, out.splitlines()) if m}

def costs(path, name, locked):
    ir = collections.Counter(); lk = collections.Counter()
    obj = fn = None; after_call = False
    with open(path) as f:
        for line in f:
            if line.startswith("ob="): obj = line[3:].strip()
            elif line.startswith("fn="): fn = line[3:].strip()
            elif line.startswith("calls="): after_call = True
            elif line.startswith("0x"):
                if after_call: after_call = False; continue
                addr, _l, *count = line.split()
                n = int(count[0]) if count else 0
                ir[fn] += n
                if obj and obj.endswith(name) and int(addr, 16) in locked: lk[fn] += n
    return ir, lk

BODY_JSON = (
    '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
    '"arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":'
    '"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"h2load","version":"0"},'
    '"io.modelcontextprotocol/clientCapabilities":{}}}}'
)


def h2(url, n, proto):
    hdr = ["-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream",
           "-H", "mcp-protocol-version: 2026-07-28", "-H", "mcp-method: tools/call", "-H", "mcp-name: echo"]
    args = ["h2load", "-t", "1", "-n", str(n), "-d", BODY] + hdr
    args += (["--h1", "-c", "64", "-m", "1"] if proto == "1.1" else ["-c", "4", "-m", "16"])
    subprocess.run(args + [url], check=True, capture_output=True)

def main():
    global BODY
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    binary, proto = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    extra = []
    locked = locked_addresses(binary)
    tmp = tempfile.mkdtemp()
    BODY = os.path.join(tmp, "body.json")
    with open(BODY, "w") as f:
        f.write(BODY_JSON)
    out = os.path.join(tmp, "cg")
    env = dict(os.environ, RUST_LOG="warn")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no", "--compress-strings=no",
                          f"--callgrind-out-file={out}", binary, "--listen", "127.0.0.1:0"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    line = p.stdout.readline()
    url = line.split()[-1]
    h2(url, 2000, proto)
    subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
    h2(url, n, proto)
    subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
    time.sleep(2)
    p.send_signal(signal.SIGKILL); p.wait()
    files = sorted(f for f in os.listdir(tmp) if f.startswith("cg"))
    path = [os.path.join(tmp, f) for f in files if f != "cg"]
    ir = collections.Counter(); lk = collections.Counter()
    for fpath in path:
        a, b = costs(fpath, os.path.basename(binary), locked); ir += a; lk += b
    print(f"{binary} HTTP/{proto}: {sum(ir.values())/n:.0f} instr/request, {sum(lk.values())/n:.2f} locked/request")
    for fn, c in lk.most_common(40):
        if c / n >= 0.02: print(f"  {c/n:6.2f}  {fn[:150]}")
    for fn, c in ir.most_common(top):
        print(f"  instructions {c/n:8.0f}  {fn[:150]}")
    shutil.rmtree(tmp)


BODY = None
if __name__ == "__main__": main()
