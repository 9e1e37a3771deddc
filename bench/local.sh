#!/usr/bin/env bash
# bench/local.sh: copies on one host (issue 41), haul against rclone, a
# real S3 server (versitygw, its posix backend on this disk) on loopback.
#
# Cases, each rep in turn (medians of --reps):
#   up     the file -> s3://bkt/KEY   (haul cp FILE s3://..., rclone copyto)
#   down   s3://bkt/KEY -> a file     (haul cp s3://... FILE, rclone copyto)
#   disk   the file -> another file   (haul cp; cp(1) beside it)
# Goodput = file bytes x 8 / wall time of the command; "x rate" and
# "x RSS" are haul's over the other tool's. Memory: the
# command's peak resident set (GNU time's %M). CPU-s/GB: the command's user
# + system time per GB (the server's own is not counted, for either tool).
# haul verifies every block (BLAKE3) and the file's digest; rclone checks
# the object's MD5 (single part) or each part's.
# Needs target/tools/versitygw and target/tools/rclone (scripts/test.sh and
# GOBIN=$PWD/target/tools go install github.com/rclone/rclone@v1.71.2) and
# a release build.
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
GW=${GW:-$REPO/target/tools/versitygw}
RCLONE=${RCLONE:-$REPO/target/tools/rclone}
SIZE=1G REPS=5
while (($#)); do
  case $1 in
    --size) SIZE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
for p in "$HAUL" "$GW" "$RCLONE" /usr/bin/time; do [[ -x $p ]] || die "missing $p"; done
BYTES=$(to_bytes "$SIZE")
W=$(mktemp -d /tmp/haul-localbench.XXXXXX)
PIDS=() NS_NAMES=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop_pid "$p"; done
  rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/s3/bkt" "$W/aws" "$W/home"
: >"$W/aws/config"
: >"$W/aws/credentials"
PORT=$((20000 + $$ % 20000))
"$GW" --access bench-key --secret bench-secret-0123456789 --quiet \
  --port "127.0.0.1:$PORT" posix "$W/s3" >/dev/null 2>&1 &
PIDS+=("$!")
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
export AWS_ACCESS_KEY_ID=bench-key AWS_SECRET_ACCESS_KEY=bench-secret-0123456789
export AWS_ENDPOINT_URL=http://127.0.0.1:$PORT AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
export AWS_CONFIG_FILE=$W/aws/config AWS_SHARED_CREDENTIALS_FILE=$W/aws/credentials
export HAUL_HOME=$W/home
B=":s3,provider=Other,access_key_id=$AWS_ACCESS_KEY_ID,secret_access_key=$AWS_SECRET_ACCESS_KEY,endpoint='$AWS_ENDPOINT_URL',no_check_bucket=true"
log "writing $SIZE of random bytes"
head -c "$BYTES" /dev/urandom >"$W/file"

# run NAME CMD...: one timed run; appends "secs rss_kib cpu_s" to $W/NAME
run() {
  local name=$1 t0 t1
  shift
  sync
  t0=$(now)
  /usr/bin/time -f '%M %U %S' -o "$W/time" "$@" >/dev/null 2>"$W/err" || {
    cat "$W/err" >&2
    die "$name failed"
  }
  t1=$(now)
  read -r rss u s <"$W/time"
  echo "$(calc "$t1 - $t0") $rss $(calc "$u + $s")" >>"$W/$name"
}

for ((i = 1; i <= REPS; i++)); do
  log "rep $i of $REPS"
  rm -f "$W/s3/bkt/h" "$W/s3/bkt/r" "$W/down-h" "$W/down-r" "$W/disk-h" "$W/disk-c"
  run up-haul "$HAUL" cp -q "$W/file" s3://bkt/h
  run up-rclone "$RCLONE" copyto "$W/file" "$B:bkt/r"
  run down-haul "$HAUL" cp -q s3://bkt/h "$W/down-h"
  run down-rclone "$RCLONE" copyto "$B:bkt/r" "$W/down-r"
  run disk-haul "$HAUL" cp -q "$W/file" "$W/disk-h"
  run disk-cp cp "$W/file" "$W/disk-c"
  cmp -s "$W/file" "$W/down-h" || die "haul's download differs"
  cmp -s "$W/file" "$W/disk-h" || die "haul's disk copy differs"
done

# med NAME N: the median of column N of NAME's runs
med() {
  local v
  mapfile -t v < <(awk -v c="$2" '{ print $c }' "$W/$1")
  median "${v[@]}"
}
printf '\n%-6s %-8s %10s %9s %10s %9s %9s\n' case tool Mbit/s CPU-s/GB MiB-RSS "x rate" "x RSS"
for c in up down disk; do
  other=rclone
  [[ $c == disk ]] && other=cp
  for t in haul "$other"; do
    secs=$(med "$c-$t" 1) rss=$(med "$c-$t" 2) cpu=$(med "$c-$t" 3)
    ratio="" mem=""
    if [[ $t == haul ]]; then
      ratio=$(fmt2 "$(calc "$(med "$c-$other" 1) / $secs")")
      mem=$(fmt2 "$(calc "$rss / $(med "$c-$other" 2)")")
    fi
    printf '%-6s %-8s %10s %9s %10s %9s %9s\n' "$c" "$t" \
      "$(fmt1 "$(calc "$BYTES * 8 / $secs / 1e6")")" "$(fmt2 "$(calc "$cpu / ($BYTES / 1e9)")")" \
      "$(fmt1 "$(calc "$rss / 1024")")" "$ratio" "$mem"
  done
done
