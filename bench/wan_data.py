#!/usr/bin/env python3
"""Dataset generators for bench/wan.sh.

  wan_data.py text OUT SIZE_BYTES [SEED]   log-like text: syslog, web access log and CSV lines
  wan_data.py tree DIR NFILES [SEED]       NFILES files of 1..64 KiB (random bytes) in nested dirs

Deterministic for a given seed except the bytes inside the tree files
(os.urandom, so that they do not compress).
"""
import os
import random
import sys

HOSTS = [f"{p}-{i:02d}" for p in ("web", "db", "cache", "batch", "edge") for i in range(1, 13)]
PROGS = [("sshd", 0.08), ("nginx", 0.35), ("kernel", 0.05), ("cron", 0.04), ("postgres", 0.12),
         ("systemd", 0.06), ("app", 0.30)]
USERS = [f"user{i}" for i in range(200)] + ["root", "deploy", "backup", "ci"]
PATHS = ["/api/v1/items/{}", "/api/v1/users/{}/orders", "/static/js/app.{}.js", "/healthz",
         "/search?q=term{}&page=2", "/login", "/img/p/{}.jpg", "/api/v2/metrics?since={}"]
METHODS = ["GET"] * 8 + ["POST"] * 2 + ["PUT", "DELETE"]
STATUS = [200] * 40 + [201, 204, 301, 302, 304, 304, 400, 401, 403, 404, 404, 500, 502, 503]
APP_MSGS = [
    "request completed in {}ms",
    "cache miss for key session:{}",
    "retrying upstream call attempt={} backoff=250ms",
    "queue depth {} exceeds soft limit",
    "worker {} finished job successfully",
    "GC pause {}ms heap=512MiB",
    "connection pool exhausted, waiting ({} pending)",
]
PG_MSGS = [
    "LOG:  duration: {}.{} ms  statement: SELECT * FROM orders WHERE id = {}",
    "LOG:  checkpoint complete: wrote {} buffers ({}.{}%)",
    "ERROR:  duplicate key value violates unique constraint \"orders_pkey\" id={}",
    "LOG:  automatic vacuum of table \"app.public.events\": index scans: {}",
]
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def text(out, size, seed):
    rng = random.Random(seed)
    r = rng.random
    ri = rng.randrange
    prog_names = [p for p, _ in PROGS]
    prog_w = [w for _, w in PROGS]
    t = 1_700_000_000.0
    written = 0
    with open(out, "w", buffering=8 << 20) as f:
        while written < size:
            lines = []
            kinds = rng.choices(("sys", "csv"), weights=(0.7, 0.3), k=4096)
            progs = rng.choices(prog_names, weights=prog_w, k=4096)
            for kind, prog in zip(kinds, progs):
                t += r() * 0.01
                sec = int(t)
                tm = (sec // 3600) % 24, (sec // 60) % 60, sec % 60
                if kind == "csv":
                    lines.append(
                        f"2026-11-{(sec // 86400) % 28 + 1:02d}T{tm[0]:02d}:{tm[1]:02d}:{tm[2]:02d}."
                        f"{int((t % 1) * 1e6):06d}Z,sensor-{ri(500):04d},"
                        f"{('temp', 'humidity', 'pressure', 'voltage')[ri(4)]},{r() * 100:.2f},"
                        f"{'ok' if r() < 0.97 else 'warn'},{ri(1 << 16)}\n")
                    continue
                host = HOSTS[ri(len(HOSTS))]
                head = (f"{MONTHS[(sec // 2_592_000) % 12]} {(sec // 86400) % 28 + 1:2d} "
                        f"{tm[0]:02d}:{tm[1]:02d}:{tm[2]:02d} {host} {prog}[{ri(1000, 65000)}]: ")
                if prog == "nginx":
                    path = PATHS[ri(len(PATHS))].format(ri(100000))
                    msg = (f"10.{ri(256)}.{ri(256)}.{ri(256)} - - \"{METHODS[ri(len(METHODS))]} {path} "
                           f"HTTP/1.1\" {STATUS[ri(len(STATUS))]} {ri(20, 200000)} {r() * 0.5:.3f} "
                           f"\"Mozilla/5.0 (X11; Linux x86_64)\"")
                elif prog == "sshd":
                    msg = (f"Accepted publickey for {USERS[ri(len(USERS))]} from 10.{ri(256)}.{ri(256)}.{ri(256)} "
                           f"port {ri(1024, 65535)} ssh2: ED25519 SHA256:{ri(1 << 60):x}")
                elif prog == "postgres":
                    msg = PG_MSGS[ri(len(PG_MSGS))].format(ri(2000), ri(1000), ri(10 ** 7))
                elif prog == "app":
                    msg = f"level=info trace={ri(1 << 64):016x} " + APP_MSGS[ri(len(APP_MSGS))].format(ri(5000))
                elif prog == "kernel":
                    msg = f"[{t - 1_699_000_000:.6f}] eth0: link up, 1000Mbps, full-duplex, lpa 0x{ri(1 << 16):04X}"
                elif prog == "cron":
                    msg = f"({USERS[ri(len(USERS))]}) CMD (/usr/local/bin/job-{ri(40)}.sh >/dev/null 2>&1)"
                else:
                    msg = f"Started session-{ri(100000)}.scope - Session {ri(100000)} of User {USERS[ri(len(USERS))]}."
                lines.append(head + msg + "\n")
            chunk = "".join(lines)
            if written + len(chunk) > size:
                chunk = chunk[: size - written]
            f.write(chunk)
            written += len(chunk)


def tree(root, nfiles, seed):
    rng = random.Random(seed)
    # three levels: 10 top dirs x 10 subdirs, files spread evenly over the 100 leaves
    for i in range(nfiles):
        top, sub = i % 10, (i // 10) % 10
        d = os.path.join(root, f"d{top:02d}", f"s{sub:02d}")
        os.makedirs(d, exist_ok=True)
        size = rng.randint(1024, 64 * 1024)
        with open(os.path.join(d, f"f{i:06d}.dat"), "wb") as f:
            f.write(os.urandom(size))


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("text", "tree"):
        sys.exit(__doc__)
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if sys.argv[1] == "text":
        text(sys.argv[2], int(sys.argv[3]), seed)
    else:
        tree(sys.argv[2], int(sys.argv[3]), seed)


if __name__ == "__main__":
    main()
