#!/usr/bin/env bash
# bench/device.sh: issue 43's cells that need a larger host than the 2-core
# VM, in one short call on a lent 16-core machine (the `device` tool), with
# nothing there but what this script carries:
#
#   cores  loopback, memory to memory: iperf3 -P 8 against haul's automatic
#          choice, --transport tcp and udp, --no-encrypt and 16 TCP streams
#          (item 4: >= 24 Gbit/s encrypted, --no-encrypt >= 0.8 x iperf3 -P 8,
#          auto >= the best fixed mode);
#   10g    10 Gbit/s, 186 ms, MTU 9000 through haul-netem, untuned and tuned,
#          loss 0 and 0.1%, a push from memory to memory: iperf3 -P 8 against
#          haul's first contact (a fresh HAUL_HOME), the same path known,
#          --transport tcp and --no-encrypt (items 1 and 3).
#
# Here, once per build:   bench/device.sh --prepare
#   builds release haul and haul-netem, strips them into .carry/bin, and
#   unpacks iperf3 with its libraries (Debian packages) into .carry/root.
# There, as root:         bench/device.sh            (about 7 minutes)
#   e.g. run(command="bench/device.sh", carry=[".carry"], timeout_s=560)
# Here, to check it:      bench/device.sh --small    (as root: small sizes,
#   the link at 1 Gbit/s, iperf3 and haul from .carry)
#
# Options: --only cores|10g, --size SIZE (default 8G; small 256M).
# Output: a table on stdout, progress on stderr, and device-STAMP.csv in $OUT
# (the device tool's folder that comes back) or bench/out.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CARRY=$ROOT/.carry

log() { printf '[device %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---- --prepare (here) -----------------------------------------------------------
prepare() {
  local d deb
  cargo build --release -q -p haul -p netem
  rm -rf "$CARRY" && mkdir -p "$CARRY/bin" "$CARRY/deb" "$CARRY/root"
  for b in haul haul-netem; do strip -o "$CARRY/bin/$b" "target/release/$b"; done
  (cd "$CARRY/deb" && apt-get download -q iperf3 libiperf0 libsctp1 >&2)
  for deb in "$CARRY"/deb/*.deb; do dpkg-deb -x "$deb" "$CARRY/root"; done
  rm -rf "$CARRY/deb" "$CARRY/root/usr/share"
  "$CARRY/bin/haul" --version
  du -sh "$CARRY"
  d=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  log "tracked files $((d >> 20)) MiB + .carry $(($(du -sb "$CARRY" | cut -f1) >> 20)) MiB (the device takes 64 MiB)"
}

# ---- options ------------------------------------------------------------------
SMALL=0 ONLY=all SIZE=""
while (($#)); do
  case $1 in
    --prepare) prepare; exit 0 ;;
    --small) SMALL=1 ;;
    --only) ONLY=${2:?--only needs cores or 10g}; shift ;;
    --size) SIZE=${2:?--size needs a value}; shift ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done
[[ $ONLY == all || $ONLY == cores || $ONLY == 10g ]] || die "--only takes cores or 10g"
((EUID == 0)) || die "run as root (namespaces, TUN devices, sysctls)"
[[ -x $CARRY/bin/haul ]] || die "no .carry/bin/haul: run bench/device.sh --prepare here first"
export PATH=$CARRY/bin:$CARRY/root/usr/bin:$PATH
export LD_LIBRARY_PATH=$CARRY/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v python3 >/dev/null || die "python3 is needed to read JSON"
if ((SMALL)); then
  : "${SIZE:=256M}"; RATE=1G IPERF_T=3 MEM_SIZE=$SIZE
else
  : "${SIZE:=8G}"; RATE=10G IPERF_T=12 MEM_SIZE=$SIZE
fi
SIZE_BYTES=$(numfmt --from=iec "${SIZE%B}")
DELAY=93 MTU=9000
OUTDIR=${OUT:-$ROOT/bench/out}
mkdir -p "$OUTDIR"
STAMP=$(date +%Y%m%d-%H%M%S)
CSV=$OUTDIR/device-$STAMP.csv
echo "part,variant,loss,tool,status,bytes,wall_s,goodput_mbit_s,limit_ratio,cpu_s_per_gb,emu_cpu_s,transport_streams,first_data_s,last_fresh_s,finished_s,note" >"$CSV"

# Stop starting links after BUDGET seconds (default 420), so that a slow
# emulator cannot outrun the device call; the rest are marked skipped.
BUDGET=${BUDGET:-420} T0=$SECONDS
WORK="" PIDS=() NETEM_PID="" DAEMON="" NS="" HOST_RMEM="" HOST_WMEM=""
cleanup() {
  local p
  set +e
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [[ -n $NETEM_PID ]] && { kill "$NETEM_PID" 2>/dev/null; wait "$NETEM_PID" 2>/dev/null; }
  [[ -n $HOST_RMEM ]] && sysctl -q -w net.core.rmem_max="$HOST_RMEM" net.core.wmem_max="$HOST_WMEM" >/dev/null
  [[ -n $WORK && -d $WORK ]] && rm -rf -- "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
WORK=$(mktemp -d /dev/shm/haul-device.XXXXXX)

# ---- measuring ------------------------------------------------------------------
# timed CMD...: runs CMD; CLI_CPU gets the user and system CPU-seconds it and
# its children spent (the command's own stderr stays where the caller sent it).
timed() {
  local rc=0 TIMEFORMAT='%U %S'
  { time "$@" 2>&3 3>&-; } 3>&2 2>"$WORK/time.out" || rc=$?
  CLI_CPU=$(awk '{ printf "%.2f", $1 + $2 }' "$WORK/time.out")
  return "$rc"
}
# proc_cpu PID: CPU-seconds of one process so far.
proc_cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.${2:-1}f\", $1 }"; }
json() { # json FILE EXPR...: fields of a JSON file, one a line, empty where absent
  python3 - "$@" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    j = {}
for path in sys.argv[2:]:
    v = j
    for k in path.split("."):
        v = v.get(k) if isinstance(v, dict) else None
    print("" if v is None else v)
PY
}
# limit MBIT_LINK RTT_S: the physical limit of SIZE_BYTES across the link
# (headers of TCP/IP with timestamps at this MTU, and two round trips), as
# bench/wan_report.py computes it.
limit() { calc "$SIZE_BYTES * 8 / ($SIZE_BYTES * 8 / ($1 * 1e6 * ($MTU - 52) / $MTU) + 2 * $2) / 1e6"; }

make_data() { # make_data FILE BYTES: random bytes, written by 16 writers at once
  local f=$1 n=$2 mib i per pids=()
  mib=$(((n + (1 << 20) - 1) >> 20)) per=$(((mib + 15) / 16))
  : >"$f"
  for ((i = 0; i < 16; i++)); do
    dd if=/dev/urandom of="$f" bs=1M seek=$((i * per)) count="$per" conv=notrunc status=none &
    pids+=($!)
  done
  wait "${pids[@]}"
  truncate -s "$n" "$f"
}

keys() { # keys HOME: a client and a server key, the client's authorized
  mkdir -p "$1"
  haul keygen -f "$1/server.key" </dev/null >/dev/null 2>&1
  haul keygen -f "$1/client.key" </dev/null >/dev/null 2>&1
  cp "$1/client.key.pub" "$1/authorized_keys"
}

# serve NS ADDR PORT ROOT HOME: a daemon, in namespace NS ("" for none); waits
# until it listens.
serve() {
  local ns=$1 addr=$2 port=$3 root=$4 home=$5 i
  local run=()
  [[ -n $ns ]] && run=(nsenter "--net=/run/netns/$ns")
  HAUL_HOME=$home "${run[@]}" haul serve --root "$root" --listen "$addr:$port" --key "$home/server.key" \
    --authorized-keys "$home/authorized_keys" </dev/null >"$WORK/serve-$port.log" 2>&1 &
  PIDS+=($!)
  for ((i = 0; i < 100; i++)); do
    "${run[@]}" bash -c "exec 3<>/dev/tcp/$addr/$port" 2>/dev/null && return 0
    sleep 0.1
  done
  tail -n 5 "$WORK/serve-$port.log" >&2
  die "haul serve on $addr:$port did not start"
}

# row PART VARIANT LOSS TOOL STATUS BYTES WALL CPU EMU STREAMS JSON LIMIT NOTE
# (CPU: seconds of both ends, client and server processes; EMU: the emulator's)
row() {
  local part=$1 variant=$2 loss=$3 tool=$4 status=$5 bytes=$6 wall=$7 cpus=$8 emu=$9
  local streams=${10} j=${11} lim=${12} note=${13:-} gp="" ratio="" cpu="" fd="" lf="" fin=""
  if [[ $status == ok && -n $bytes && -n $wall ]]; then
    gp=$(calc "$bytes * 8 / $wall / 1e6")
    [[ -n $lim ]] && ratio=$(calc "$gp / $lim" 3)
    [[ -n $cpus ]] && cpu=$(calc "$cpus / ($bytes / 1e9)" 2)
  fi
  if [[ -n $j && -s $j ]]; then
    { read -r fd; read -r lf; read -r fin; } < <(json "$j" timeline_s.first_data timeline_s.last_fresh timeline_s.finished)
  fi
  echo "$part,$variant,$loss,$tool,$status,$bytes,$wall,$gp,$ratio,$cpu,$emu,$streams,$fd,$lf,$fin,$note" >>"$CSV"
  log "  $tool: ${gp:-–} Mbit/s${ratio:+ ($ratio of the limit)}${cpu:+, $cpu CPU s/GB}${emu:+, emulator $emu s}${streams:+, $streams} $note"
}

# ---- cores: loopback, memory to memory -----------------------------------------
cores() {
  local home=$WORK/home-cores data=$WORK/cores/data.bin port=7461 mode flags j t0 t1 s0 s1 st n daemon
  log "cores: $(nproc) cores, $MEM_SIZE from /dev/shm to /dev/null on loopback"
  mkdir -p "$WORK/cores"
  make_data "$data" "$SIZE_BYTES"
  keys "$home"
  # iperf3 -P 8, memory to memory (its own sum_received)
  if command -v iperf3 >/dev/null; then
    iperf3 -s -1 -B 127.0.0.1 -p 7460 >/dev/null 2>&1 &
    PIDS+=($!)
    sleep 0.3
    j=$WORK/iperf3-cores.json s0=$(proc_cpu "${PIDS[-1]}")
    timed timeout $((IPERF_T + 30)) iperf3 -c 127.0.0.1 -p 7460 -P 8 -t "$IPERF_T" -J >"$j" 2>/dev/null && st=ok || st=fail
    s1=$(proc_cpu "${PIDS[-1]}")
    { read -r n; read -r t0; } < <(json "$j" end.sum_received.bytes end.sum_received.seconds)
    row cores loopback 0 "iperf3 -P 8" "$st" "${n%.*}" "$t0" "$(calc "$CLI_CPU + $s1 - $s0" 2)" "" 8 "" "" \
      "memory, ${IPERF_T} s"
  else
    row cores loopback 0 "iperf3 -P 8" skipped "" "" "" "" "" "" "" "no iperf3 (run --prepare)"
  fi
  serve "" 127.0.0.1 "$port" "$WORK/cores" "$home"
  daemon=${PIDS[-1]}
  for mode in auto tcp udp no-encrypt tcp16; do
    case $mode in
      auto) flags=() ;;
      tcp) flags=(--transport tcp) ;;
      udp) flags=(--transport udp) ;;
      no-encrypt) flags=(--no-encrypt) ;;
      tcp16) flags=(--transport tcp --streams 16) ;;
    esac
    j=$WORK/haul-cores-$mode.json
    s0=$(proc_cpu "$daemon") t0=$(now)
    HAUL_HOME=$home timed timeout 300 haul cp --json -q "${flags[@]}" -i "$home/client.key" \
      --known-hosts "$home/known_hosts" "127.0.0.1:$port:data.bin" /dev/null >"$j" 2>"$j.err" && st=ok || st=fail
    t1=$(now) s1=$(proc_cpu "$daemon")
    row cores loopback 0 "haul $mode" "$st" "$(json "$j" file_bytes)" "$(calc "$t1 - $t0" 3)" \
      "$(calc "$CLI_CPU + $s1 - $s0" 2)" "" \
      "$(json "$j" transport)/$(json "$j" streams)" "$j" "" "$( [[ $st == ok ]] || tail -n 1 "$j.err" | tr ',' ';' | cut -c1-100)"
  done
  kill "$daemon" 2>/dev/null || true
  rm -f -- "$data"
}

# ---- 10g: the trans-Pacific DTN path --------------------------------------------
netem_up() { # netem_up LOSS: the emulated link, namespaces $NS-a and $NS-b
  local i
  NS=hd$$
  haul-netem --name "$NS" --delay "$DELAY" --rate "$RATE" --loss "$1" --mtu "$MTU" \
    --ready-file "$WORK/netem.ready" --stats-json "$WORK/netem-$1.json" >"$WORK/netem.log" 2>&1 &
  NETEM_PID=$!
  for ((i = 0; i < 150; i++)); do [[ -e $WORK/netem.ready ]] && return 0; sleep 0.1; done
  tail -n 5 "$WORK/netem.log" >&2
  die "haul-netem did not come up (no namespaces or TUN here?)"
}
netem_down() {
  kill "$NETEM_PID" 2>/dev/null || true
  wait "$NETEM_PID" 2>/dev/null || true
  NETEM_PID=""
  rm -f "$WORK/netem.ready"
}
tune() { # tune untuned|tuned: socket buffers for a 232 MB BDP, or the defaults
  local ns
  [[ $1 == tuned ]] || return 0
  HOST_RMEM=$(sysctl -n net.core.rmem_max) HOST_WMEM=$(sysctl -n net.core.wmem_max)
  sysctl -q -w net.core.rmem_max=536870912 net.core.wmem_max=536870912 >/dev/null
  for ns in "$NS-a" "$NS-b"; do
    # net.core.*_max are host-wide on most kernels, per namespace on some
    nsenter "--net=/run/netns/$ns" sysctl -q -w net.core.rmem_max=536870912 net.core.wmem_max=536870912 \
      >/dev/null 2>&1 || true
    nsenter "--net=/run/netns/$ns" sysctl -q -w net.ipv4.tcp_rmem="4096 131072 536870912" \
      net.ipv4.tcp_wmem="4096 65536 536870912" >/dev/null 2>&1 || log "WARNING: tcp_rmem/tcp_wmem not set in $ns"
  done
}
untune() {
  [[ -n $HOST_RMEM ]] && sysctl -q -w net.core.rmem_max="$HOST_RMEM" net.core.wmem_max="$HOST_WMEM" >/dev/null
  HOST_RMEM="" HOST_WMEM=""
}

# push VARIANT LOSS TOOL HOME FLAGS...: one push of the data file from NS-a to
# the daemon in NS-b, timed by the wall clock of the client command.
push() {
  local variant=$1 loss=$2 tool=$3 home=$4 j t0 t1 s0 s1 e0 e1 st
  shift 4
  j=$WORK/haul-$variant-$loss-${tool// /_}.json
  rm -f "$WORK/recv/data.bin"
  s0=$(proc_cpu "$DAEMON") e0=$(proc_cpu "$NETEM_PID") t0=$(now)
  HAUL_HOME=$home timed timeout 120 nsenter "--net=/run/netns/$NS-a" haul cp --json -q "$@" -i "$home/client.key" \
    --known-hosts "$home/known_hosts" "$WORK/send/data.bin" "198.18.0.2:7462:data.bin" >"$j" 2>"$j.err" && st=ok || st=fail
  t1=$(now) s1=$(proc_cpu "$DAEMON") e1=$(proc_cpu "$NETEM_PID")
  [[ $st == ok ]] && ! cmp -s "$WORK/send/data.bin" "$WORK/recv/data.bin" && st=corrupt
  row 10g "$variant" "$loss" "$tool" "$st" "$SIZE_BYTES" "$(calc "$t1 - $t0" 3)" "$(calc "$CLI_CPU + $s1 - $s0" 2)" \
    "$(calc "$e1 - $e0" 2)" "$(json "$j" transport)/$(json "$j" streams)" "$j" "$LIMIT" \
    "$( [[ $st == ok ]] || tail -n 1 "$j.err" | tr ',' ';' | cut -c1-100)"
  rm -f "$WORK/recv/data.bin"
}

link() { # link VARIANT LOSS: every tool across one emulated link
  local variant=$1 loss=$2 home=$WORK/home-$1-$2 j s0 s1 e0 e1 st n t ipid
  if ((SECONDS - T0 > BUDGET)); then
    row 10g "$variant" "$loss" "all tools" skipped "" "" "" "" "" "" "" "past the budget of $BUDGET s"
    return 0
  fi
  LIMIT=$(limit "${RATE%G}000" "$(calc "2 * $DELAY / 1000" 3)")
  log "10g: $RATE, $((2 * DELAY)) ms, MTU $MTU, loss $loss%, $variant (limit $LIMIT Mbit/s)"
  netem_up "$loss"
  tune "$variant"
  keys "$home"
  serve "$NS-b" 198.18.0.2 7462 "$WORK/recv" "$home"
  DAEMON=${PIDS[-1]}
  if command -v iperf3 >/dev/null; then
    nsenter "--net=/run/netns/$NS-b" iperf3 -s -1 -B 198.18.0.2 -p 7463 >/dev/null 2>&1 &
    PIDS+=($!) ipid=$!
    sleep 0.3
    j=$WORK/iperf3-$variant-$loss.json
    s0=$(proc_cpu "$ipid") e0=$(proc_cpu "$NETEM_PID")
    timed timeout $((IPERF_T + 40)) nsenter "--net=/run/netns/$NS-a" iperf3 -c 198.18.0.2 -p 7463 -P 8 -t "$IPERF_T" -J \
      >"$j" 2>/dev/null && st=ok || st=fail
    s1=$(proc_cpu "$ipid") e1=$(proc_cpu "$NETEM_PID")
    { read -r n; read -r t; } < <(json "$j" end.sum_received.bytes end.sum_received.seconds)
    row 10g "$variant" "$loss" "iperf3 -P 8" "$st" "${n%.*}" "$t" "$(calc "$CLI_CPU + $s1 - $s0" 2)" \
      "$(calc "$e1 - $e0" 2)" 8 "" "$LIMIT" \
      "memory, ${IPERF_T} s"
  fi
  # A first contact (nothing known of the path), then the same path known.
  push "$variant" "$loss" "haul first contact" "$home"
  push "$variant" "$loss" "haul known path" "$home"
  push "$variant" "$loss" "haul --transport tcp" "$home" --transport tcp
  push "$variant" "$loss" "haul --no-encrypt" "$home" --no-encrypt
  kill "$DAEMON" 2>/dev/null || true
  untune
  netem_down
}

tengig() {
  if ! command -v nsenter >/dev/null || [[ ! -c /dev/net/tun ]]; then
    row 10g - - "all tools" skipped "" "" "" "" "" "" "" "needs nsenter and /dev/net/tun"
    return 0
  fi
  mkdir -p "$WORK/send" "$WORK/recv"
  make_data "$WORK/send/data.bin" "$SIZE_BYTES"
  local v l
  for v in untuned tuned; do
    for l in 0 0.1; do link "$v" "$l"; done
  done
}

log "$(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r), haul $(haul --version 2>/dev/null | head -1)"
[[ $ONLY == all || $ONLY == cores ]] && cores
[[ $ONLY == all || $ONLY == 10g ]] && tengig
log "CSV: $CSV"
column -s, -t <"$CSV" 2>/dev/null || cat "$CSV"
