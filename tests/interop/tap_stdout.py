#!/usr/bin/env python3
"""Runs a stdio MCP server and copies its stdout through unchanged, logging
each line with the wall-clock time it was read, so a test can check what the
client saw and when.

    tap_stdout.py LOGFILE -- COMMAND ARGS...

Each log line is `<pid> <unix-epoch-ns> <the line>`; the file is appended to
(a client may start the server more than once)."""
import os
import signal
import subprocess
import sys
import time


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    log_path, cmd = sys.argv[1], sys.argv[3:]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE)

    def stop(signum, _frame):
        child.terminate()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pid = os.getpid()
    out = sys.stdout.buffer
    with open(log_path, "ab", buffering=0) as log:
        for line in child.stdout:
            out.write(line)
            out.flush()
            log.write(b"%d %d " % (pid, time.time_ns()) + line)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
