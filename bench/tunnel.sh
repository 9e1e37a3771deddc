#!/usr/bin/env bash
# bench/tunnel.sh: `haul tunnel` against direct TCP, in one run (P-37).
#
#   1. latency: median 100-byte round trip through the tunnel and direct,
#      on idle loopback;
#   2. bulk: one TCP flow of random bytes (nc) across the emulator at
#      --delay ms each way, --rate, --loss percent: direct, and through
#      the tunnel (cache and compression on; random data gains nothing
#      from them);
#   3. replication: a PostgreSQL primary (namespace b) and its streaming
#      replica (namespace a) through the tunnel over the same link; a
#      pgbench write load; the WAL bytes a direct connection would carry
#      (the tunnel's original bytes) against the tunnel's wire bytes.
#
# Needs root (namespaces, TUN, running postgres as user postgres),
# haul-netem, nc, python3, PostgreSQL. Prints a table; --out FILE also
# writes it as CSV.
#
#   sudo bench/tunnel.sh [--delay 75] [--rate 1G] [--loss 0.1] [--size 256M] [--pgbench-seconds 30]
#                        [--tunnel-args "--no-cache --compress none"]
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
NETEM=${NETEM:-$REPO/target/release/haul-netem}
DELAY=75 RATE=1G LOSS=0.1 SIZE=256M PGSECONDS=30 SCALE=5 OUT="" TARGS=""
while (($#)); do
  case $1 in
    --delay) DELAY=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --pgbench-seconds) PGSECONDS=$2; shift 2 ;;
    --scale) SCALE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --tunnel-args) TARGS=$2; shift 2 ;;
    -h|--help) sed -n 2,21p "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
die() { echo "tunnel.sh: $*" >&2; exit 1; }
((EUID == 0)) || die "must run as root (namespaces, TUN, postgres as user postgres)"
[[ -x $HAUL && -x $NETEM ]] || die "build first: cargo build --release -p haul -p netem"
command -v nc >/dev/null || die "nc not found"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[[ -x $PGBIN/initdb ]] || die "PostgreSQL not found (apt-get install postgresql)"

TMP=$(mktemp -d /tmp/haul-tunnel-bench.XXXXXX)
chmod 755 "$TMP"
NAME=tb$$
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for d in "$TMP/pg/primary" "$TMP/pg/replica"; do
    [[ -f $d/postmaster.pid ]] || continue
    local ns=$NAME-b; [[ $d == */replica ]] && ns=$NAME-a
    ip netns exec "$ns" runuser -u postgres -- "$PGBIN/pg_ctl" stop -m immediate -D "$d" >/dev/null 2>&1 || true
  done
  sleep 0.5
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
bg() { "$@" & PIDS+=($!); }
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
ROWS=()
row() { ROWS+=("$1,$2,$3"); printf '  %-44s %14s  %s\n' "$1" "$2" "$3"; }

export HAUL_HOME=$TMP/home
mkdir -p "$HAUL_HOME" "$TMP/root"
"$HAUL" keygen -f "$HAUL_HOME/id_x25519" >"$HAUL_HOME/authorized_keys" 2>/dev/null

# ---- 1. latency on idle loopback ----------------------------------------
cat >"$TMP/echo.py" <<'EOF'
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16)
def serve(c):
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while (d := c.recv(65536)):
        c.sendall(d)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
cat >"$TMP/ping.py" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = []
for i in range(int(sys.argv[2])):
    a = time.perf_counter(); s.sendall(b"x" * 100); n = 0
    while n < 100: n += len(s.recv(1000))
    t.append(time.perf_counter() - a)
t.sort(); print(f"{t[len(t)//2]*1e3:.3f} {t[int(len(t)*0.99)]*1e3:.3f}")
EOF
echo "== latency: 100-byte round trips on idle loopback (median, p99; ms)"
bg python3 "$TMP/echo.py" 17801
bg "$HAUL" serve --root "$TMP/root" --listen 127.0.0.1:17850 --tunnel-to 127.0.0.1:17801 2>"$TMP/serve-lo.log"
sleep 0.5
# shellcheck disable=SC2086
bg "$HAUL" tunnel --listen 17802 --to 127.0.0.1:17801 --via 127.0.0.1:17850 $TARGS 2>"$TMP/tunnel-lo.log"
for _ in $(seq 50); do [[ -f $HAUL_HOME/tunnels/17802.json ]] && break; sleep 0.1; done
read -r d50 d99 < <(python3 "$TMP/ping.py" 17801 2000)
read -r t50 t99 < <(python3 "$TMP/ping.py" 17802 2000)
row "loopback round trip direct (median / p99)" "$d50 / $d99" ms
row "loopback round trip tunnel (median / p99)" "$t50 / $t99" ms
row "added by the tunnel (median)" "$(calc "$t50 - $d50")" ms

# ---- the emulated link -----------------------------------------------------
echo "== link: ${DELAY} ms each way, $RATE, $LOSS% loss each way"
bg "$NETEM" --name "$NAME" --delay "$DELAY" --rate "$RATE" --loss "$LOSS" --ready-file "$TMP/ready" 2>"$TMP/netem.log"
for _ in $(seq 100); do [[ -f $TMP/ready ]] && break; sleep 0.1; done
[[ -f $TMP/ready ]] || die "haul-netem did not come up: $(cat "$TMP/netem.log")"
A="ip netns exec $NAME-a" B="ip netns exec $NAME-b" ADDR_B=198.18.0.2
bg $B "$HAUL" serve --root "$TMP/root" --listen $ADDR_B:7050 \
  --tunnel-to 127.0.0.1:5001 --tunnel-to 127.0.0.1:15432 2>"$TMP/serve.log"
sleep 0.5

# ---- 2. one bulk flow -------------------------------------------------------
head -c "$SIZE" /dev/urandom >"$TMP/random.bin"
BYTES=$(stat -c %s "$TMP/random.bin")
bulk() { # bulk HOST PORT: seconds for one nc flow from ns a into ns b
  local host=$1 port=$2 rpid t0 t1
  $B nc -l 5001 >/dev/null & rpid=$!
  sleep 0.3
  t0=$(now)
  $A nc -N "$host" "$port" <"$TMP/random.bin"
  wait $rpid || true
  t1=$(now)
  calc "$t1 - $t0"
}
echo "== bulk: one TCP flow of $BYTES random bytes"
direct=$(bulk $ADDR_B 5001)
row "bulk direct (one TCP connection)" "$(calc "$BYTES * 8 / $direct / 1e6")" "Mbit/s ($direct s)"
# shellcheck disable=SC2086 # TARGS is words
bg $A "$HAUL" tunnel --listen 15001 --to 127.0.0.1:5001 --via $ADDR_B:7050 $TARGS 2>"$TMP/tunnel-bulk.log"
for _ in $(seq 100); do [[ -f $HAUL_HOME/tunnels/15001.json ]] && break; sleep 0.1; done
lanes=$(sed -n 's/.*: \([0-9]*\) lanes.*/\1/p' "$TMP/tunnel-bulk.log")
tunneled=$(bulk 127.0.0.1 15001)
row "bulk through the tunnel ($lanes lanes)" "$(calc "$BYTES * 8 / $tunneled / 1e6")" "Mbit/s ($tunneled s)"
row "tunnel / direct" "$(calc "$direct / $tunneled")" "x"

# ---- 3. replication ------------------------------------------------------------
echo "== replication: PostgreSQL streaming replica through the tunnel, pgbench -s $SCALE for ${PGSECONDS}s"
mkdir -p "$TMP/pg" && chown postgres:postgres "$TMP/pg"
pg() { local ns=$1; shift; ip netns exec "$ns" runuser -u postgres -- "$PGBIN/$1" "${@:2}"; }
pg "$NAME-b" initdb -D "$TMP/pg/primary" -U postgres --auth=trust --no-sync >/dev/null
pg "$NAME-b" pg_ctl start -w -D "$TMP/pg/primary" -l "$TMP/pg/primary.log" \
  -o "-p 15432 -k $TMP/pg -c listen_addresses=127.0.0.1 -c fsync=off -c wal_keep_size=1GB" >/dev/null
# shellcheck disable=SC2086
bg $A "$HAUL" tunnel --listen 25432 --to 127.0.0.1:15432 --via $ADDR_B:7050 $TARGS 2>"$TMP/tunnel-pg.log"
for _ in $(seq 100); do [[ -f $HAUL_HOME/tunnels/25432.json ]] && break; sleep 0.1; done
psql_b() { pg "$NAME-b" psql -h 127.0.0.1 -p 15432 -U postgres -Atc "$1"; }
pg "$NAME-b" pgbench -h 127.0.0.1 -p 15432 -U postgres -i -s "$SCALE" -q postgres >/dev/null 2>&1
pg "$NAME-a" pg_basebackup -h 127.0.0.1 -p 25432 -U postgres -D "$TMP/pg/replica" -R -X stream --checkpoint=fast --no-sync
pg "$NAME-a" pg_ctl start -w -D "$TMP/pg/replica" -l "$TMP/pg/replica.log" \
  -o "-p 35432 -k $TMP/pg -c listen_addresses=127.0.0.1" >/dev/null
stats() { "$HAUL" tunnel --stats --json --listen 25432; }
sleep 1.5 # the statistics file is rewritten every second: let it count the base backup
before=$(stats)
lsn0=$(psql_b "SELECT pg_current_wal_lsn()")
tps=$(pg "$NAME-b" pgbench -h 127.0.0.1 -p 15432 -U postgres -T "$PGSECONDS" -c 4 -j 2 postgres 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
lsn1=$(psql_b "SELECT pg_current_wal_lsn()")
for _ in $(seq 600); do
  [[ $(pg "$NAME-a" psql -h 127.0.0.1 -p 35432 -U postgres -Atc "SELECT pg_last_wal_replay_lsn() >= '$lsn1'") == t ]] && break
  sleep 0.1
done
sleep 1.5 # the tunnel's statistics file is rewritten every second
after=$(stats)
wal=$(psql_b "SELECT pg_wal_lsn_diff('$lsn1', '$lsn0')")
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['tunnels'][0]['total'][sys.argv[2]])" "$1" "$2"; }
orig=$(( $(field "$after" original_bytes) - $(field "$before" original_bytes) ))
wire=$(( $(field "$after" wire_bytes) - $(field "$before" wire_bytes) ))
row "pgbench on the primary" "$tps" "tps"
row "WAL written by the primary" "$wal" "bytes"
row "replication bytes, direct connection" "$orig" "bytes (the tunnel's original bytes)"
row "replication bytes, on the tunnel's lanes" "$wire" "bytes"
row "saved by the tunnel" "$(calc "100 * ($orig - $wire) / $orig")" "%"
echo "tunnel totals (whole run, base backup included): $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['tunnels'][0]['total'])" "$after")"

if [[ -n $OUT ]]; then
  { echo "what,value,unit"; printf '%s\n' "${ROWS[@]}"; } >"$OUT"
  echo "CSV: $OUT"
fi
