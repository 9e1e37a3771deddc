#!/usr/bin/env bash
# bench/metrics.sh: what `haul serve --metrics` costs (issue 29): loopback
# pushes of --size to a daemon without it and to one with it, its page and
# metrics fetched every second meanwhile (as a browser and Prometheus
# would), alternating, medians of --reps. Source and roots in a tmpfs, so
# disks do not set the pace. Needs root (the tmpfs).
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
SIZE=1G REPS=5
while (($#)); do
  case $1 in
    --size) SIZE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -h|--help) sed -n 2,7p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root (tmpfs)"
BYTES=$(to_bytes "$SIZE")
W=$(mktemp -d /tmp/haul-metricsbench.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop_pid "$p" 1; done
  umount "$W/t" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/t"
mount -t tmpfs -o size=$((BYTES * 3 + (64 << 20))) tmpfs "$W/t"
mkdir -p "$W/t/plain" "$W/t/watched" "$W/home" "$W/srv"
head -c "$BYTES" /dev/urandom > "$W/t/data.bin"
HAUL_HOME=$W/home "$HAUL" keygen -f "$W/home/id_x25519" > "$W/srv/authorized_keys" 2>/dev/null
HAUL_HOME=$W/srv "$HAUL" serve --root "$W/t/plain" --listen 127.0.0.1:7361 2>"$W/plain.log" & PIDS+=($!)
HAUL_HOME=$W/srv "$HAUL" serve --root "$W/t/watched" --listen 127.0.0.1:7362 --metrics 127.0.0.1:7363 2>"$W/watched.log" & PIDS+=($!)
sleep 1
# A browser and a Prometheus server, once a second each.
(while :; do
   exec 3<>/dev/tcp/127.0.0.1/7363 && printf 'GET /status.json HTTP/1.0\r\n\r\n' >&3 && cat <&3 >/dev/null; exec 3<&-
   exec 3<>/dev/tcp/127.0.0.1/7363 && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3 >/dev/null; exec 3<&-
   sleep 1
 done) & PIDS+=($!)
run() {
  local t0
  rm -f "$W/t/$1/data.bin"
  t0=$(now)
  HAUL_HOME=$W/home "$HAUL" cp -q "$W/t/data.bin" "127.0.0.1:$2:data.bin" && cmp -s "$W/t/data.bin" "$W/t/$1/data.bin" && calc "$(now) - $t0"
}
plain=() watched=()
for ((r = 1; r <= REPS; r++)); do
  a=$(run plain 7361); b=$(run watched 7362)
  log "rep $r: without $a s, with --metrics $b s"
  plain+=("$a"); watched+=("$b")
done
p=$(median "${plain[@]}"); w=$(median "${watched[@]}")
gp=$(calc "$BYTES * 8 / $p / 1e6"); gw=$(calc "$BYTES * 8 / $w / 1e6")
page=$(exec 3<>/dev/tcp/127.0.0.1/7363; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3 | wc -c)
printf '\n%s loopback pushes, medians of %s alternating reps\n' "$SIZE" "$REPS"
printf 'without --metrics: %s Mbit/s; with --metrics, page and metrics fetched every second: %s Mbit/s (%s)\n' \
  "$(fmt1 "$gp")" "$(fmt1 "$gw")" "$(fmt2 "$(calc "$gw / $gp")")"
printf 'status page: %s bytes with its headers, refreshed every 1 s from /status.json\n' "$page"
exit 0
