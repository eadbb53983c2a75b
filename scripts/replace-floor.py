#!/usr/bin/env python3
"""The floor of an atomic rewrite of a Docker node's files (scripts/bench-node.sh, issue 16).

    replace-floor.py CONTAINERS_DIR IDS_FILE

For every container id in IDS_FILE (one per line: the ids the plan rewrites), replaces
CONTAINERS_DIR/<id>/config.v2.json by the write that any crash-safe tool must make at least:
the same bytes written to a temp file beside it, one `syncfs` (the temp files durable before
any of them replaces its target), every rename, one more `syncfs` (the renames durable). No
JSON is read or edited, nothing is backed up, one thread: the part of `patch` no implementation
can avoid on this file system, for comparing with `cp -r` + `sync`. The files are read before
the clock starts. Prints one JSON line: {"files": N, "ms": total, "stage_ms", "sync1_ms",
"rename_ms", "sync2_ms"}.
"""
import ctypes
import json
import os
import sys
import time

_libc = ctypes.CDLL(None, use_errno=True)


def syncfs(fd):
    """syncfs(2) of the file system holding fd (Python's os has no wrapper)."""
    if _libc.syncfs(fd) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def main():
    containers, ids_file = sys.argv[1], sys.argv[2]
    with open(ids_file) as f:
        ids = [line.split()[0] for line in f if line.strip()]
    files = [os.path.join(containers, i, "config.v2.json") for i in ids]
    data = []
    for p in files:
        with open(p, "rb") as f:
            data.append(f.read())
    fd = os.open(containers, os.O_RDONLY | os.O_DIRECTORY)
    t0 = time.perf_counter()
    temps = []
    for p, b in zip(files, data):
        t = os.path.join(os.path.dirname(p), ".config.v2.json.floor-tmp")
        with open(t, "wb") as f:
            f.write(b)
        temps.append(t)
    t1 = time.perf_counter()
    syncfs(fd)
    t2 = time.perf_counter()
    for t, p in zip(temps, files):
        os.rename(t, p)
    t3 = time.perf_counter()
    syncfs(fd)
    t4 = time.perf_counter()
    os.close(fd)
    ms = lambda a, b: round((b - a) * 1e3, 1)
    print(json.dumps({"files": len(files), "ms": ms(t0, t4), "stage_ms": ms(t0, t1),
                      "sync1_ms": ms(t1, t2), "rename_ms": ms(t2, t3), "sync2_ms": ms(t3, t4)}))


if __name__ == "__main__":
    main()
