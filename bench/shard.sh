#!/usr/bin/env bash
# bench/shard.sh: one transfer split into shards over several links at once
# (haul cp --shard, issue 28), against one haul over one link.
#
# N namespace pairs joined by haul-netem, one per shard (each a: 198.18.0.1,
# b: 198.18.0.2), every link RATE and RTT 2 x DELAY. A haul serve in each b
# writes into the same directory (the "shared file system" of the receiving
# hosts); each a runs one shard, all at once. The tree: one large file
# (split across shards) and many 4 MiB files. Cases, each rep in turn:
#   shards   N shards at once, one per link: aggregate goodput
#   single   one haul over one link, moving a 1/N share of the bytes
# Reported: aggregate goodput against the sum of the links' limits, the
# single link against its own, the plan's time (haul plan --emit json over
# the tree), and the coordination overhead: the slowest shard's wall time
# less the single haul's, for the same bytes per link. Medians of --reps.
# Needs root (namespaces).
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
NETEM=${NETEM:-$REPO/target/release/haul-netem}
SHARDS=4 SIZE=1G REPS=5 RATE=250M DELAY=75 LOSS=0
while (($#)); do
  case $1 in
    --shards) SHARDS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root (namespaces)"
for p in "$HAUL" "$NETEM"; do [[ -x $p ]] || die "missing $p"; done
BYTES=$(to_bytes "$SIZE")
NAME=hsh$$ B=198.18.0.2
W=$(mktemp -d /tmp/haul-shardbench.XXXXXX)
PIDS=() NS_NAMES=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop_pid "$p" 1; done
  delete_our_namespaces
  rm -rf "$W"
}
trap cleanup EXIT

mkdir -p "$W/src/files" "$W/shared" "$W/home-a" "$W/home-b"
# Half the bytes in one large file, half in 4 MiB files.
head -c $((BYTES / 2)) /dev/urandom > "$W/src/large.bin"
for ((i = 0; i < BYTES / 2 / (4 << 20); i++)); do
  head -c $((4 << 20)) /dev/urandom > "$W/src/files/f$(printf %04d "$i")"
done
HAUL_HOME=$W/home-a "$HAUL" keygen -f "$W/home-a/id_x25519" > "$W/home-b/authorized_keys" 2>/dev/null

log "$SHARDS links: $RATE, ${DELAY} ms one way, loss $LOSS %"
for ((k = 0; k < SHARDS; k++)); do
  args=(--name "$NAME$k" --rate "$RATE" --delay "$DELAY" --ready-file "$W/ready$k" --seed $((k + 1)) --mtu 1500)
  [[ $LOSS != 0 ]] && args+=(--loss "$LOSS")
  setsid "$NETEM" "${args[@]}" >"$W/emu$k.log" 2>&1 & PIDS+=($!)
  NS_NAMES+=("$NAME$k-a" "$NAME$k-b")
done
for ((k = 0; k < SHARDS; k++)); do
  for _ in $(seq 100); do [[ -e $W/ready$k ]] && break; sleep 0.1; done
  [[ -e $W/ready$k ]] || die "emulator $k did not start: $(cat "$W/emu$k.log")"
  ip netns exec "$NAME$k-b" env HAUL_HOME="$W/home-b" "$HAUL" serve --root "$W/shared" --listen "$B:7050" >"$W/serve$k.log" 2>&1 & PIDS+=($!)
done
sleep 1

t0=$(now)
"$HAUL" plan --shards "$SHARDS" -r --emit json "$W/src/" "$B:7050:dst/" > "$W/plan.json"
plan_s=$(calc "$(now) - $t0")
log "plan: $(json_get "$W/plan.json" .plan), $(json_get "$W/plan.json" .files) files, in $(fmt2 "$plan_s") s"

# One shard's share of the bytes, for the single-link case: the largest.
share=$(python3 -c 'import json,sys; print(max(s["bytes"] for s in json.load(open(sys.argv[1]))["split"]))' "$W/plan.json")
head -c "$share" /dev/urandom > "$W/share.bin"

run_shards() {
  local k pids=() t0 t1 worst=0 rc=0
  rm -rf "$W/shared/dst" "$W/shared/share.bin"
  sync; t0=$(now)
  for ((k = 0; k < SHARDS; k++)); do
    (ip netns exec "$NAME$k-a" env HAUL_HOME="$W/home-a" "$HAUL" cp -q -r --shard "$k/$SHARDS" "$W/src/" "$B:7050:dst/" 2>>"$W/errors.log"
     echo "$(now)" > "$W/done$k") & pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || rc=1; done
  t1=$(now)
  for ((k = 0; k < SHARDS; k++)); do
    worst=$(awk -v a="$worst" -v b="$(calc "$(cat "$W/done$k") - $t0")" 'BEGIN { print (b > a ? b : a) }')
  done
  ((rc == 0)) && diff -r -q -x .haul-shards "$W/src" "$W/shared/dst" >/dev/null && echo "$(calc "$t1 - $t0") $worst"
  return 0
}
run_single() {
  local t0
  rm -f "$W/shared/share.bin"
  sync; t0=$(now)
  ip netns exec "$NAME""0-a" env HAUL_HOME="$W/home-a" "$HAUL" cp -q "$W/share.bin" "$B:7050:share.bin" 2>>"$W/errors.log" &&
    cmp -s "$W/share.bin" "$W/shared/share.bin" && calc "$(now) - $t0"
  return 0
}

declare -a T_SHARDS=() T_WORST=() T_SINGLE=()
for ((r = 1; r <= REPS; r++)); do
  out=$(run_shards)
  log "rep $r shards: ${out:-FAILED}"
  [[ -n $out ]] && { T_SHARDS+=("${out% *}"); T_WORST+=("${out#* }"); }
  out=$(run_single)
  log "rep $r single: ${out:-FAILED}"
  [[ -n $out ]] && T_SINGLE+=("$out")
done
((${#T_SHARDS[@]} && ${#T_SINGLE[@]})) || die "no complete run: $(tail -5 "$W/errors.log")"
rate_bps=$(to_bytes "${RATE%M}M"); rate_bps=$((rate_bps / 1048576 * 1000000))
link_limit() { calc "$1 * 8 / ($1 * 8 / ($rate_bps * 0.965) + 2 * $DELAY * 2 / 1000) / 1e6"; }
s=$(median "${T_SHARDS[@]}"); w=$(median "${T_WORST[@]}"); one=$(median "${T_SINGLE[@]}")
agg=$(calc "$BYTES * 8 / $s / 1e6")
sum_limit=$(calc "$SHARDS * $(link_limit "$share")")
single=$(calc "$share * 8 / $one / 1e6")
printf '\n%s in %s shards over %s links of %s, RTT %s ms, loss %s %% (medians of %s reps)\n' \
  "$SIZE" "$SHARDS" "$SHARDS" "$RATE" "$((DELAY * 2))" "$LOSS" "${#T_SHARDS[@]}"
printf 'shards, aggregate: %s Mbit/s = %s of the links'"'"' sum (%s Mbit/s)\n' "$(fmt1 "$agg")" "$(fmt2 "$(calc "$agg / $sum_limit")")" "$(fmt1 "$sum_limit")"
printf 'single haul, one link, one share (%s bytes): %s Mbit/s = %s of its link\n' "$share" "$(fmt1 "$single")" "$(fmt2 "$(calc "$single / $(link_limit "$share")")")"
printf 'aggregate over %s x single: %s\n' "$SHARDS" "$(fmt2 "$(calc "$agg / ($SHARDS * $single)")")"
printf 'plan: %s s; coordination (slowest shard less the single haul): %s s\n' "$(fmt2 "$plan_s")" "$(fmt2 "$(calc "$w - $one")")"
[[ -s $W/errors.log ]] && { log "errors:"; tail -5 "$W/errors.log" >&2; }
exit 0
