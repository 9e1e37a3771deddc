#!/usr/bin/env bash
# bench/clouds.sh: gs:// and az:// across an emulated long link, haul
# against rclone, each store's own emulator standing in for the cloud.
#
# Two namespaces joined by haul-netem (a: 198.18.0.1, b: 198.18.0.2). In b,
# the store (fake-gcs-server for --store gs, Azurite for --store az, both
# in memory) and a haul daemon beside it; in a, the file. Cases, each rep
# in turn (medians of --reps):
#   haul-file    the file (a) -> haul -> a haul serve's disk in b: the
#                same path without a store, what haul reaches in this cell
#   haul-bucket  the file (a) -> haul -> haul serve --root gs://... (or
#                az://) in b -> the store in b
#   rclone       rclone copyto, the file (a) -> the store in b, its own
#                client across the link (Azure: 16 blocks in flight of
#                8 MiB; GCS: rclone's one upload per object, as its GCS
#                backend makes it, with its defaults)
# Goodput = file bytes x 8 / wall time; haul verifies every block and the
# store checks each part's checksum (GCS CRC32C, Azure MD5); rclone checks
# the object's MD5.
# CPU-s/GB: every process of the case (both ends and the store), not the
# emulator, from a cgroup of this script's. Needs root, the emulators in
# target/tools (scripts/test.sh installs them) and rclone
# (GOBIN=$PWD/target/tools go install github.com/rclone/rclone@v1.71.2).
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
NETEM=${NETEM:-$REPO/target/release/haul-netem}
FGCS=${FGCS:-$REPO/target/tools/fake-gcs-server}
AZURITE=${AZURITE:-$REPO/target/tools/azurite/node_modules/.bin/azurite-blob}
RCLONE=${RCLONE:-$REPO/target/tools/rclone}
STORE=gs SIZE=256M REPS=5 RATE=1000M DELAY=75 LOSS=0 CASES=haul-file,haul-bucket,rclone
while (($#)); do
  case $1 in
    --store) STORE=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root (namespaces)"
[[ $STORE == gs || $STORE == az ]] || die "--store is gs or az"
for p in "$HAUL" "$NETEM"; do [[ -x $p ]] || die "missing $p"; done
BYTES=$(to_bytes "$SIZE")
NAME=hcl$$ A=198.18.0.1 B=198.18.0.2
ACCT=devstoreaccount1
AZKEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
W=$(mktemp -d /tmp/haul-cloudbench.XXXXXX)
PIDS=() NS_NAMES=("$NAME-a" "$NAME-b")
read -r CG_MODE CG_BASE <<<"$(cg_base)"
CG=""
if [[ -n ${CG_MODE:-} ]] && mkdir "$CG_BASE/haul-cloudbench-$$" 2>/dev/null; then
  CG=$CG_BASE/haul-cloudbench-$$
else
  log "WARNING: no writable cgroup; CPU columns will read 0"
fi
cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop_pid "$p" 1; done
  delete_our_namespaces
  if [[ -n $CG && -d $CG ]]; then
    xargs -r kill < "$CG/cgroup.procs" 2>/dev/null || true
    sleep 0.3; rmdir "$CG" 2>/dev/null || true
  fi
  rm -rf "$W"
}
trap cleanup EXIT
cpu() { if [[ -n $CG ]]; then cg_read "$CG_MODE" "$CG"; else echo 0; fi; }
inside() {
  local ns=$1; shift
  [[ -z $CG ]] || echo "$BASHPID" > "$CG/cgroup.procs"
  if [[ $ns == - ]]; then exec "$@"; else exec ip netns exec "$ns" "$@"; fi
}
in_fg() { (inside "$@"); }

log "emulator: $RATE, ${DELAY} ms one way, loss $LOSS %, store $STORE"
emu_args=(--name "$NAME" --rate "$RATE" --delay "$DELAY" --ready-file "$W/ready" --seed 1 --mtu 1500)
[[ $LOSS != 0 ]] && emu_args+=(--loss "$LOSS")
setsid "$NETEM" "${emu_args[@]}" >"$W/emu.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do [[ -e $W/ready ]] && break; sleep 0.1; done
[[ -e $W/ready ]] || die "emulator did not start: $(cat "$W/emu.log")"

mkdir -p "$W/disk" "$W/home-a" "$W/home-b" "$W/gcs/bkt" "$W/az"
head -c "$BYTES" /dev/urandom > "$W/data.bin"
if [[ $STORE == gs ]]; then
  [[ -x $FGCS ]] || die "missing $FGCS"
  inside "$NAME-b" "$FGCS" -scheme http -host "$B" -port 4443 -backend memory -log-level error \
    -public-host "$B:4443" -data "$W/gcs" >/dev/null 2>&1 & PIDS+=($!)
  STORE_ENV=(STORAGE_EMULATOR_HOST="http://$B:4443")
  URL=gs://bkt
  RC=":gcs,anonymous=true,endpoint='http://$B:4443/storage/v1/',bucket_policy_only=true"
  RC_FLAGS=()
else
  [[ -x $AZURITE ]] || die "missing $AZURITE"
  (cd "$W/az" && inside "$NAME-b" "$AZURITE" --blobHost "$B" --blobPort 10000 --silent \
    --skipApiVersionCheck --inMemoryPersistence --disableTelemetry >/dev/null 2>&1) & PIDS+=($!)
  CS="DefaultEndpointsProtocol=http;AccountName=$ACCT;AccountKey=$AZKEY;BlobEndpoint=http://$B:10000/$ACCT;"
  STORE_ENV=(AZURE_STORAGE_CONNECTION_STRING="$CS")
  URL=az://$ACCT/bkt
  RC=":azureblob,account=$ACCT,key='$AZKEY',endpoint='http://$B:10000/$ACCT'"
  RC_FLAGS=(--azureblob-upload-concurrency 16 --azureblob-chunk-size 8M)
fi
sleep 2
if [[ $STORE == az ]]; then
  # The container, made by rclone (haul makes none).
  ip netns exec "$NAME-b" "$RCLONE" mkdir "$RC:bkt" || die "cannot make the container"
fi
HAUL_HOME=$W/home-a "$HAUL" keygen -f "$W/home-a/id_x25519" > "$W/home-b/authorized_keys" 2>/dev/null
inside "$NAME-b" env HAUL_HOME="$W/home-b" "$HAUL" serve --root "$W/disk" --listen "$B:7050" >/dev/null 2>&1 & PIDS+=($!)
inside "$NAME-b" env HAUL_HOME="$W/home-b" "${STORE_ENV[@]}" "$HAUL" serve --root "$URL/" --listen "$B:7051" >"$W/serve-bucket.log" 2>&1 & PIDS+=($!)
sleep 1

# run CASE REP: one rep; prints "seconds cpu_seconds" or nothing when it
# failed. Each rep writes a key of its own: a first upload every time,
# never a rewrite over a basis, for haul and rclone alike.
run() {
  local t0 t1 c0 c1 ok=0 key=data-$2.bin
  rm -f "$W/disk/data.bin"
  sync; c0=$(cpu); t0=$(now)
  case $1 in
    haul-file) in_fg "$NAME-a" env HAUL_HOME="$W/home-a" "$HAUL" cp -q --daemon "$W/data.bin" "$B:7050:data.bin" && cmp -s "$W/data.bin" "$W/disk/data.bin" && ok=1 ;;
    haul-bucket) in_fg "$NAME-a" env HAUL_HOME="$W/home-a" "$HAUL" cp -q --daemon "$W/data.bin" "$B:7051:haul-$key" && ok=1 ;;
    rclone) in_fg "$NAME-a" "$RCLONE" copyto -q --no-check-dest "${RC_FLAGS[@]}" "$W/data.bin" "$RC:bkt/rclone-$key" && ok=1 ;;
  esac
  t1=$(now); c1=$(cpu)
  ((ok)) && echo "$(calc "$t1 - $t0") $(calc "$c1 - $c0")"
  return 0
}

IFS=, read -r -a cases <<< "$CASES"
declare -A secs cpus
for ((r = 1; r <= REPS; r++)); do
  for c in "${cases[@]}"; do
    [[ $c == rclone && ! -x $RCLONE ]] && continue
    out=$(run "$c" "$r" 2>>"$W/errors.log" || true)
    log "rep $r $c: ${out:-FAILED}"
    [[ -n $out ]] && { secs[$c]+="${out% *} "; cpus[$c]+="${out#* } "; }
  done
done
[[ -s $W/errors.log ]] && { log "errors:"; tail -n 20 "$W/errors.log" >&2; }
rate_bps=$(to_bytes "${RATE%M}M"); rate_bps=$((rate_bps / 1048576 * 1000000))
limit=$(calc "$BYTES * 8 / ($BYTES * 8 / ($rate_bps * 0.965) + 2 * $DELAY * 2 / 1000) / 1e6")
printf '\n%s of random data to %s, link %s, RTT %s ms, loss %s %%: limit %s Mbit/s (96.5%% of the link, two round trips)\n' \
  "$SIZE" "$STORE" "$RATE" "$((DELAY * 2))" "$LOSS" "$(fmt1 "$limit")"
printf '%-12s %10s %8s %9s %6s\n' case Mbit/s "of limit" "CPU-s/GB" runs
for c in "${cases[@]}"; do
  [[ -n ${secs[$c]:-} ]] || { printf '%-12s %10s\n' "$c" "-"; continue; }
  # shellcheck disable=SC2086
  s=$(median ${secs[$c]}); cp_=$(median ${cpus[$c]})
  g=$(calc "$BYTES * 8 / $s / 1e6"); n=$(wc -w <<< "${secs[$c]}")
  printf '%-12s %10s %8s %9s %6s\n' "$c" "$(fmt1 "$g")" "$(fmt2 "$(calc "$g / $limit")")" "$(fmt2 "$(calc "$cp_ / ($BYTES / 1e9)")")" "$n"
  declare "good_${c//-/_}=$g"
done
[[ -n ${good_rclone:-} && -n ${good_haul_bucket:-} ]] &&
  printf 'haul-bucket / rclone: %s\n' "$(fmt2 "$(calc "$good_haul_bucket / $good_rclone")")"
exit 0
