#!/usr/bin/env bash
# bench/dedup.sh: what re-sending a changed big file costs. A tar of
# random files (incompressible, so only deduplication can help) already
# sits at the destination; the source then gains an appended file, or
# 1 MiB inserted in its middle. haul pushes each over loopback to a
# daemon holding the old copy; rsync (local, --no-whole-file, so that it
# uses its delta algorithm as it would over a network) copies the same
# files onto the same old copy. Both sides' bytes are printed: haul's
# wire bytes (everything on its connections, both ways) and rsync's
# "sent" and "received". See bench/README.md.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
HAUL=${HAUL:-$(cd "$SCRIPT_DIR/.." && pwd)/target/release/haul}
SIZE=4G
APPEND=50M
DIR=${TMPDIR:-/var/tmp}

usage() {
  cat <<EOF
Usage: $0 [--size 4G] [--append 50M] [--dir DIR]

Builds a SIZE tar of random files in DIR (default \$TMPDIR or /var/tmp;
about 4 x SIZE of space is needed), then measures re-sending it with an
APPEND file appended, and with 1 MiB inserted in the middle, with haul and
rsync. CSV in $SCRIPT_DIR/out/.
EOF
}

while (($#)); do
  case $1 in
    --size) SIZE=$2; shift ;;
    --append) APPEND=$2; shift ;;
    --dir) DIR=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (try --help)" ;;
  esac
  shift
done
[[ -x $HAUL ]] || die "no haul binary at $HAUL (cargo build --release, or HAUL=PATH)"
command -v rsync >/dev/null || die "rsync is missing"
SIZE_BYTES=$(to_bytes "$SIZE")
APPEND_BYTES=$(to_bytes "$APPEND")
(($(avail_bytes "$DIR") > 4 * SIZE_BYTES + APPEND_BYTES)) || die "not enough space in $DIR"

WORK=$(mktemp -d "$DIR/haul-dedup.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf -- "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/files" "$WORK/src" "$WORK/root" "$WORK/home"

log "building a $SIZE tar of random files"
n=$((SIZE_BYTES / (64 << 20)))
((n > 0)) || n=1
for ((i = 0; i < n; i++)); do
  head -c $((SIZE_BYTES / n)) /dev/urandom >"$WORK/files/part$i.bin"
done
tar -C "$WORK" -cf "$WORK/base.tar" files
rm -rf "$WORK/files"
BASE=$(stat -c %s "$WORK/base.tar")

log "the appended variant: tar --append of a $APPEND random file"
mkdir -p "$WORK/extra"
head -c "$APPEND_BYTES" /dev/urandom >"$WORK/extra/new.bin"
cp "$WORK/base.tar" "$WORK/src/append.tar"
tar -C "$WORK" -rf "$WORK/src/append.tar" extra
log "the inserted variant: 1 MiB in the middle"
half=$((BASE / 2))
{
  head -c "$half" "$WORK/base.tar"
  head -c $((1 << 20)) /dev/urandom
  tail -c +$((half + 1)) "$WORK/base.tar"
} >"$WORK/src/insert.tar"

HAUL_HOME=$WORK/home "$HAUL" keygen -f "$WORK/home/id_x25519" >"$WORK/home/authorized_keys" 2>/dev/null
PORT=$((20000 + RANDOM % 20000))
HAUL_HOME=$WORK/home "$HAUL" serve --listen "127.0.0.1:$PORT" --root "$WORK/root" 2>"$WORK/serve.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q "listening on" "$WORK/serve.log" && break; sleep 0.1; done
grep -q "listening on" "$WORK/serve.log" || die "haul serve did not start"

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$SCRIPT_DIR/out"
CSV=$SCRIPT_DIR/out/dedup-$STAMP.csv
echo "case,tool,file_bytes,bytes_sent,bytes_received,wall_s,percent_of_file" >"$CSV"
printf '\n%-8s %-6s %14s %14s %14s %9s %9s\n' case tool "file bytes" "sent" "received" "wall s" "% of file"
for c in append insert; do
  src=$WORK/src/$c.tar
  fbytes=$(stat -c %s "$src")
  # haul: the old copy is at the destination under the same name.
  cp "$WORK/base.tar" "$WORK/root/$c.tar"
  sync
  t0=$(now)
  HAUL_HOME=$WORK/home "$HAUL" cp --json -q "$src" "127.0.0.1:$PORT:$c.tar" >"$WORK/haul.json"
  t1=$(now)
  cmp -s "$src" "$WORK/root/$c.tar" || die "haul: $c copy differs"
  wire=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wire_bytes"])' "$WORK/haul.json")
  wall=$(calc "$t1 - $t0")
  pct=$(calc "$wire * 100 / $fbytes")
  echo "$c,haul,$fbytes,$wire,,$wall,$pct" >>"$CSV"
  printf '%-8s %-6s %14s %14s %14s %9s %9s\n' "$c" haul "$fbytes" "$wire" "(in sent)" "$(fmt1 "$wall")" "$(calc "$pct" | awk '{ printf "%.3f", $1 }')"
  rm -f "$WORK/root/$c.tar"

  # rsync onto the same old copy.
  mkdir -p "$WORK/rs"
  cp "$WORK/base.tar" "$WORK/rs/$c.tar"
  sync
  t0=$(now)
  rsync --no-whole-file --stats "$src" "$WORK/rs/$c.tar" >"$WORK/rsync.out"
  t1=$(now)
  cmp -s "$src" "$WORK/rs/$c.tar" || die "rsync: $c copy differs"
  sent=$(awk '/^Total bytes sent:/ { gsub(",", "", $4); print $4 }' "$WORK/rsync.out")
  recv=$(awk '/^Total bytes received:/ { gsub(",", "", $4); print $4 }' "$WORK/rsync.out")
  wall=$(calc "$t1 - $t0")
  pct=$(calc "($sent + $recv) * 100 / $fbytes")
  echo "$c,rsync,$fbytes,$sent,$recv,$wall,$pct" >>"$CSV"
  printf '%-8s %-6s %14s %14s %14s %9s %9s\n' "$c" rsync "$fbytes" "$sent" "$recv" "$(fmt1 "$wall")" "$(calc "$pct" | awk '{ printf "%.3f", $1 }')"
  rm -rf "$WORK/rs"
done
echo "CSV: $CSV"
