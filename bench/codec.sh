#!/usr/bin/env bash
# bench/codec.sh: compression on loopback (127.0.0.1), no emulator: haul
# with --compress auto, none, lz4 and zstd against nc piped through
# zstd -T0 and pigz, on zeros, random bytes, log-like text and a copy of
# /usr/share. The emulated links are bench/wan.sh's (tools haul-lz4,
# haul-zstd, haul-nocomp; dataset usr). See bench/README.md.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
HAUL=${HAUL:-$(cd "$SCRIPT_DIR/.." && pwd)/target/release/haul}
SIZE=1G
REPS=1
DATASETS=zeros,random,text,usr
TOOLS=haul,haul-none,haul-lz4,haul-zstd,nc-zstd,nc-pigz
CAP=600

usage() {
  cat <<EOF
Usage: $0 [--size 1G] [--reps N] [--datasets LIST] [--tools LIST]

Datasets: zeros random text usr (usr: a copy of /usr/share, whatever its size).
Tools: haul (auto) haul-none haul-lz4 haul-zstd nc-zstd nc-pigz.
Pushes each dataset over loopback to a haul daemon (or nc) writing to
/dev/shm, verifies it, and prints goodput in Mbit/s over the whole command,
the median of the repetitions, with auto's ratio to the best fixed choice
and to nc+zstd / nc+pigz. CSV in $SCRIPT_DIR/out/.
EOF
}

while (($#)); do
  case $1 in
    --size) SIZE=$2; shift ;;
    --reps) REPS=$2; shift ;;
    --datasets) DATASETS=$2; shift ;;
    --tools) TOOLS=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option $1 (try --help)" ;;
  esac
  shift
done
[[ -x $HAUL ]] || die "no haul binary at $HAUL (cargo build --release, or HAUL=PATH)"
for t in nc zstd pigz python3; do command -v "$t" >/dev/null || die "$t is missing"; done
SIZE_BYTES=$(to_bytes "$SIZE")
IFS=, read -r -a DS <<<"$DATASETS"
IFS=, read -r -a TL <<<"$TOOLS"

WORK=$(mktemp -d /dev/shm/haul-codec.XXXXXX)
DATA=$WORK/data RECV=$WORK/recv HOME_DIR=$WORK/home
mkdir -p "$DATA" "$RECV" "$HOME_DIR"
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf -- "$WORK"
}
trap cleanup EXIT

declare -A PATH_OF KIND BYTES
for d in "${DS[@]}"; do
  case $d in
    zeros) PATH_OF[$d]=$DATA/zeros.bin; head -c "$SIZE_BYTES" /dev/zero >"${PATH_OF[$d]}" ;;
    random) PATH_OF[$d]=$DATA/random.bin; head -c "$SIZE_BYTES" /dev/urandom >"${PATH_OF[$d]}" ;;
    text) PATH_OF[$d]=$DATA/text.log; python3 "$SCRIPT_DIR/wan_data.py" text "${PATH_OF[$d]}" "$SIZE_BYTES" 1 ;;
    usr) PATH_OF[$d]=$DATA/usr; cp -a /usr/share "${PATH_OF[$d]}" ;;
    *) die "unknown dataset $d" ;;
  esac
  if [[ -d ${PATH_OF[$d]} ]]; then
    KIND[$d]=tree
    BYTES[$d]=$(find "${PATH_OF[$d]}" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
    (cd "$DATA" && find "$d" -type f -print0 | sort -z | xargs -0 sha256sum) >"$WORK/$d.manifest"
  else
    KIND[$d]=file
    BYTES[$d]=$(stat -c %s "${PATH_OF[$d]}")
  fi
  log "dataset $d: ${BYTES[$d]} bytes"
done

# The daemon, with a key for the client.
HAUL_HOME=$HOME_DIR "$HAUL" keygen -f "$HOME_DIR/id_x25519" >"$HOME_DIR/authorized_keys" 2>/dev/null
PORT=$((20000 + RANDOM % 20000))
HAUL_HOME=$HOME_DIR "$HAUL" serve --listen "127.0.0.1:$PORT" --root "$RECV" 2>"$WORK/serve.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q "listening on" "$WORK/serve.log" && break; sleep 0.1; done
grep -q "listening on" "$WORK/serve.log" || die "haul serve did not start: $(cat "$WORK/serve.log")"

verify() {
  local d=$1 name
  name=$(basename "${PATH_OF[$d]}")
  if [[ ${KIND[$d]} == tree ]]; then
    (cd "$RECV" && find "$name" -type f -print0 | sort -z | xargs -0 -r sha256sum) | cmp -s - "$WORK/$d.manifest"
  else
    cmp -s -- "${PATH_OF[$d]}" "$RECV/$name"
  fi
}

run_haul() { # run_haul DATASET MODE
  local d=$1 mode=$2 flags
  flags=(--json -q --compress "$mode")
  [[ ${KIND[$d]} == tree ]] && flags+=(-r)
  HAUL_HOME=$HOME_DIR timeout "$CAP" "$HAUL" cp "${flags[@]}" "${PATH_OF[$d]}" \
    "127.0.0.1:$PORT:$(basename "${PATH_OF[$d]}")" >"$WORK/run.json" 2>"$WORK/run.err"
}

run_nc() { # run_nc DATASET COMPRESS DECOMPRESS
  local d=$1 comp=$2 decomp=$3 name parent nport send recv rpid rc=0
  name=$(basename "${PATH_OF[$d]}") parent=$(dirname "${PATH_OF[$d]}")
  nport=$((PORT + 1))
  if [[ ${KIND[$d]} == tree ]]; then
    send="tar -c -C '$parent' '$name'" recv="tar -x -C '$RECV'"
  else
    send="cat '${PATH_OF[$d]}'" recv="cat > '$RECV/$name'"
  fi
  timeout "$CAP" bash -o pipefail -c "nc -l 127.0.0.1 $nport | $decomp | $recv" &
  rpid=$!
  for _ in $(seq 100); do ss -ltn | grep -q ":$nport " && break; sleep 0.02; done
  timeout "$CAP" bash -o pipefail -c "$send | $comp | nc -N 127.0.0.1 $nport" || rc=$?
  wait "$rpid" || rc=$?
  return "$rc"
}

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$SCRIPT_DIR/out"
CSV=$SCRIPT_DIR/out/codec-$STAMP.csv
echo "dataset,tool,rep,bytes,wall_s,goodput_mbit,wire_bytes,status" >"$CSV"
declare -A MED VALS
# Reps go round the tools (auto, none, lz4, ... then again), so that a
# drift in the machine (page cache, a neighbour's load) hits every tool
# alike instead of whichever ran its reps during it; and each rep starts
# one tool further on (rep 2 with none, rep 3 with lz4, ...), so that no
# tool always runs first after the dataset's warm-up.
for d in "${DS[@]}"; do
  # One untimed transfer first: the first run after a dataset is made (or
  # the last one's 4 GiB removed) paid up to twice the time in every
  # tool's place, and that was always auto's, first in the round.
  run_haul "$d" none >/dev/null 2>&1 || true
  find "$RECV" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
  sync
  for ((r = 1; r <= REPS; r++)); do
    for ((k = 0; k < ${#TL[@]}; k++)); do
      t=${TL[$(((r - 1 + k) % ${#TL[@]}))]}
      find "$RECV" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +
      sync
      t0=$(now) rc=0 wire=""
      case $t in
        haul) run_haul "$d" auto || rc=$? ;;
        haul-none) run_haul "$d" none || rc=$? ;;
        haul-lz4) run_haul "$d" lz4 || rc=$? ;;
        haul-zstd) run_haul "$d" zstd || rc=$? ;;
        nc-zstd) run_nc "$d" "zstd -T0 -q -c" "zstd -d -q -c" || rc=$? ;;
        nc-pigz) run_nc "$d" "pigz -c" "pigz -d -c" || rc=$? ;;
        *) die "unknown tool $t" ;;
      esac
      t1=$(now)
      wall=$(calc "$t1 - $t0")
      [[ $t == haul* && -s $WORK/run.json ]] && wire=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("wire_bytes",""))' "$WORK/run.json" 2>/dev/null || true)
      status=ok
      if ((rc != 0)); then status="fail($rc)"; elif ! verify "$d"; then status=mismatch; fi
      gp=$(calc "${BYTES[$d]} * 8 / $wall / 1e6")
      echo "$d,$t,$r,${BYTES[$d]},$wall,$gp,$wire,$status" >>"$CSV"
      log "$d $t rep $r: $(fmt1 "$gp") Mbit/s in $(fmt1 "$wall") s ($status)"
      [[ $status == ok ]] && VALS[$d,$t]+="$gp "
    done
  done
  for t in "${TL[@]}"; do
    # shellcheck disable=SC2086 # the values are words
    [[ -n ${VALS[$d,$t]:-} ]] && MED[$d,$t]=$(median ${VALS[$d,$t]}) || MED[$d,$t]=0
  done
done

# The table: goodput per cell, then auto against the best fixed choice
# and against the nc pipelines.
printf '\n%-8s' dataset
for t in "${TL[@]}"; do printf ' %10s' "$t"; done
printf ' %12s %10s %10s\n' "auto/best" "auto/zstd" "auto/pigz"
for d in "${DS[@]}"; do
  printf '%-8s' "$d"
  best=0
  for t in "${TL[@]}"; do
    printf ' %10s' "$(fmt1 "${MED[$d,$t]}")"
    case $t in haul-none|haul-lz4|haul-zstd) best=$(awk -v a="$best" -v b="${MED[$d,$t]}" 'BEGIN { print (b > a) ? b : a }') ;; esac
  done
  ratio() { awk -v a="${MED[$d,haul]:-0}" -v b="$1" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }'; }
  printf ' %12s %10s %10s\n' "$(ratio "$best")" "$(ratio "${MED[$d,nc-zstd]:-0}")" "$(ratio "${MED[$d,nc-pigz]:-0}")"
done
echo "CSV: $CSV"
