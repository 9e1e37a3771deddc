#!/usr/bin/env bash
# bench/udp.sh: haul's UDP data channel across an emulated WAN (haul-netem).
#
# Four parts, each selectable with --only:
#   goodput   haul cp --transport udp vs --transport tcp (and one iperf3 TCP flow)
#             at 1 Gbit/s, 150 ms RTT with 0 / 0.1 / 1 / 10 % loss and 600 ms RTT
#             with 1 % loss; goodput per link, re-sent datagrams per sent
#   rate      --transport udp --rate 500M: the average wire rate against the cap
#   fair      one iperf3 CUBIC flow (tuned buffers), then a haul push joins 5 s
#             later, once per sharing mode (FAIR_MODES: default = --fair on over
#             UDP, background = --background, tcp = --transport tcp,
#             tcp-background = both, off = --fair off; cubic = one more
#             iperf3 flow in haul's place, the yardstick of a fair share): the
#             shares both take of the link while both run; the TCP modes push
#             once alone first, so that the path is known
#   loopback  pull to /dev/null over 127.0.0.1, udp vs tcp, encrypted and not
# The emulator joins namespaces NAME-a (198.18.0.1, sender) and NAME-b
# (198.18.0.2, receiver), as created (untuned). See bench/README.md.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
NETEM=${NETEM:-$REPO/target/release/haul-netem}
SERVER_TTL=${SERVER_TTL:-3600}   # hard upper bound on any background process
export JSON_TOOL=python3         # read by json_get in lib.sh

ADDR_A=198.18.0.1
ADDR_B=198.18.0.2
HAUL_PORT=7050
IPERF_PORT=5201
LINK_RATE=1G
LINK_BPS=1000000000

# goodput profiles: name|one-way delay ms|loss % (both directions)|goal (goodput / link)
ALL_PROFILES=(
  "loss0|75|0|0.95"
  "loss0.1|75|0.1|0.95"
  "loss1|75|1|0.90"
  "loss10|75|10|0.80"
  "rtt600-loss1|300|1|0.90"
)
ALL_PARTS=(goodput rate fair loopback)
RATE_CAP=500M RATE_CAP_BPS=500000000 RATE_TOL=0.03     # rate: average within +-3 %
FAIR_MODES=${FAIR_MODES:-default,background,tcp,tcp-background}
FAIR_CC=${FAIR_CC:-cubic}   # the competing flow's congestion control
FAIR_FLOWS=${FAIR_FLOWS:-1} # competing flows (iperf3 -P): a fair share leaves them N/(N+1)
[[ $FAIR_FLOWS =~ ^[1-9]$ ]] || { echo "FAIR_FLOWS must be 1 to 9" >&2; exit 2; }
# fair: iperf3 -t, haul start (s after iperf3), haul push sized for FAIR_SECS at half the link;
# the environment may override them (integers, FAIR_SECS may be fractional) for developing this script
FAIR_T=${FAIR_T:-40} FAIR_START=${FAIR_START:-5} FAIR_SECS=${FAIR_SECS:-25}
RESENT_SLACK=0.01                                    # re-sent fraction <= loss + 1 %

# ---- options ----------------------------------------------------------------
QUICK=0
SIZE_ARG=""
MTU=9000
ONLY_ARG=""
PROFILES_ARG=""
IPERF_TIME=""
TCP_CAP=""

usage() {
  cat <<EOF
Usage: $0 [options]        (run as root)

Benchmarks haul's UDP data channel across haul-netem (1 Gbit/s, untuned namespaces):
  goodput   haul --transport udp vs tcp (+ iperf3, 1 TCP flow) at 150 ms RTT with
            0/0.1/1/10 % loss and at 600 ms RTT with 1 % loss
  rate      --transport udp --rate $RATE_CAP at 150 ms, 0 % loss
  fair      $FAIR_FLOWS iperf3 $FAIR_CC flow(s) (-t $FAIR_T) joined after ${FAIR_START} s by a haul push, once per
            mode in FAIR_MODES ($FAIR_MODES): its share while both run
  loopback  pull to /dev/null over 127.0.0.1: udp vs tcp, encrypted and --no-encrypt

Options:
  --quick            1 GiB file, iperf3 -t 5, --tcp-cap 15 (explicit options still win);
                     expected about 5 minutes (full run: about 15)
  --size SIZE        file pushed in goodput/rate/loopback: 4G, 512M, 4GiB or bytes (default 8G; --quick 2G)
  --mtu N            MTU of the emulated link (default 9000; at 1500 the emulator is
                     CPU-bound on a 2-core machine)
  --only LIST        comma list of: ${ALL_PARTS[*]} (default all)
  --profiles LIST    goodput profiles, comma list of: $(printf '%s ' "${ALL_PROFILES[@]%%|*}")(default all)
  --iperf-time SECS  iperf3 -t of the goodput reference flow (default 10; quick 5)
  --tcp-cap SECS     stop each haul --transport tcp reference run after SECS (0: the same cap
                     as the UDP runs, the default; quick 15); a stopped run shows goodput < bound
  -h, --help         this help

Environment: HAUL, NETEM (binaries; default target/release/haul and haul-netem).
Output: table on stdout, progress on stderr, bench/out/udp-STAMP.csv.
EOF
}

# ---- state ------------------------------------------------------------------
P_BOUND=""
SHM_DIR="" TMP_DIR="" DATA="" ROOT="" FAIR_FILE="" CSV="" ROWS="" META=""
SIZE_BYTES=0
PIDS=()              # background processes this script started (and only those)
BG_PID=""
NS_NAMES=()          # namespaces haul-netem created for us
EMU_PID="" EMU_NAME="" NS_A="" NS_B="" EMU_DESC=""
HAUL_PID="" HAUL_LOG="" LO_PORT=""
PARTS=() PROFILES=()
STAMP="" T_START=0 CSV_DONE=0 ARGS_STR=""
NS_CC="?"
# summary lines: claim|measured|goal|result, and one line per goodput profile
SUMMARY=() GP_SUM=()

# ---- process helpers --------------------------------------------------------

# stop_pid PID [SECS]: TERM, wait up to SECS (3) s, then KILL. Only for PIDs we
# started (each is a `timeout` that relays the signal to its own process group).

# start_bg LOG TTL CMD...: CMD in the background under `timeout TTL` (its own
# process group, so a timeout or stop_pid reaches all of it); PID in BG_PID.
start_bg() {
  local logf=$1 ttl=$2
  shift 2
  timeout --kill-after=5 "$ttl" "$@" </dev/null >"$logf" 2>&1 &
  BG_PID=$!
  PIDS+=("$BG_PID")
}

# wait_pid PID: wait for a PID we started; returns its status

# wait_exit PID SECS: give a PID we started SECS to exit by itself, else stop it
wait_exit() {
  local pid=$1 secs=$2 i
  for ((i = 0; i < secs * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then stop_pid "$pid"; return 124; fi
  wait_pid "$pid"
}

# client CAP OUT NETNS|- CMD...: one foreground command (in namespace NETNS, or
# on the host for -) under a cap, stdout to OUT, stderr to OUT.err. Run in the
# background and waited for, so INT/TERM reach our trap at once. Sets
# C_T0/C_T1 around it and returns its exit status.
C_T0="" C_T1=""
client() {
  local cap=$1 out=$2 ns=$3 pid rc=0 pre=()
  shift 3
  [[ $ns == - ]] || pre=(ip netns exec "$ns")
  C_T0=$(now)
  timeout --kill-after=5 "$cap" "${pre[@]}" "$@" </dev/null >"$out" 2>"$out.err" &
  pid=$!
  PIDS+=("$pid")
  wait_pid "$pid" || rc=$?
  C_T1=$(now)
  return "$rc"
}

# wait_listen NETNS|- PROTO PORT PID WHAT LOG: <= 10 s for a listener; polls the
# socket table (no connection), so one-shot servers are not consumed
wait_listen() {
  local ns=$1 proto=$2 port=$3 pid=$4 what=$5 logf=$6 i flag=-Hltn pre=()
  [[ $proto == udp ]] && flag=-Hlun
  [[ $ns == - ]] || pre=(ip netns exec "$ns")
  for ((i = 0; i < 100; i++)); do
    [[ -n $("${pre[@]}" ss "$flag" "sport = :$port" 2>/dev/null) ]] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$logf" >&2 || true
      log "$what exited before listening on port $port"
      return 1
    fi
    sleep 0.1
  done
  tail -n 20 "$logf" >&2 || true
  log "$what not listening on port $port after 10 s"
  return 1
}

free_port() {
  local p i
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 40000))
    [[ -n $(ss -Htan "sport = :$p" 2>/dev/null) ]] || { echo "$p"; return 0; }
  done
  die "no free port found"
}

# ---- options ----------------------------------------------------------------
split_list() { # split_list VAR LIST ALLOWED...
  local -n _out=$1
  local list=$2 item ok a items=()
  shift 2
  _out=()
  IFS=',' read -r -a items <<<"$list"
  for item in "${items[@]}"; do
    [[ -n $item ]] || continue
    ok=0
    for a in "$@"; do [[ $item == "$a" ]] && ok=1; done
    ((ok)) || die "unknown item '$item' (allowed: $*)"
    _out+=("$item")
  done
}

parse_args() {
  while (($#)); do
    case $1 in
      --quick) QUICK=1 ;;
      --size) SIZE_ARG=${2:?--size needs a value}; shift ;;
      --size=*) SIZE_ARG=${1#*=} ;;
      --mtu) MTU=${2:?--mtu needs a value}; shift ;;
      --mtu=*) MTU=${1#*=} ;;
      --only) ONLY_ARG=${2:?--only needs a value}; shift ;;
      --only=*) ONLY_ARG=${1#*=} ;;
      --profiles) PROFILES_ARG=${2:?--profiles needs a value}; shift ;;
      --profiles=*) PROFILES_ARG=${1#*=} ;;
      --iperf-time) IPERF_TIME=${2:?--iperf-time needs a value}; shift ;;
      --iperf-time=*) IPERF_TIME=${1#*=} ;;
      --tcp-cap) TCP_CAP=${2:?--tcp-cap needs a value}; shift ;;
      --tcp-cap=*) TCP_CAP=${1#*=} ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown option: $1" ;;
    esac
    shift
  done
  if ((QUICK)); then : "${SIZE_ARG:=2G}" "${IPERF_TIME:=5}" "${TCP_CAP:=15}"; fi
  : "${SIZE_ARG:=8G}" "${IPERF_TIME:=10}" "${TCP_CAP:=0}"
  local names=("${ALL_PROFILES[@]%%|*}")
  : "${ONLY_ARG:=$(IFS=,; echo "${ALL_PARTS[*]}")}"
  : "${PROFILES_ARG:=$(IFS=,; echo "${names[*]}")}"
  split_list PARTS "$ONLY_ARG" "${ALL_PARTS[@]}"
  split_list PROFILES "$PROFILES_ARG" "${names[@]}"
  ((${#PARTS[@]})) || die "nothing selected with --only"
  in_range "$MTU" 1280 65535 || die "--mtu must be an integer 1280..65535"
  in_range "$IPERF_TIME" 1 600 || die "--iperf-time must be an integer 1..600"
  in_range "$FAIR_T" 5 600 || die "FAIR_T must be an integer 5..600"
  in_range "$FAIR_START" 0 $((FAIR_T - 1)) || die "FAIR_START must be an integer below FAIR_T"
  [[ $FAIR_SECS =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "FAIR_SECS must be a number of seconds"
  in_range "$TCP_CAP" 0 86400 || die "--tcp-cap must be an integer number of seconds"
  MTU=$((10#$MTU)) IPERF_TIME=$((10#$IPERF_TIME)) TCP_CAP=$((10#$TCP_CAP))
  SIZE_BYTES=$(to_bytes "$SIZE_ARG")
  in_range "$SIZE_BYTES" 1048576 $((1 << 40)) || die "bad --size: $SIZE_ARG (1 MiB .. 1 TiB)"
}

want() { local p; for p in "${PARTS[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }

ensure_packages() {
  local p
  if ! pkg_installed iperf3 && ! command -v iperf3 >/dev/null; then
    log "installing: iperf3"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -qq || log "WARNING: apt-get update failed"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq iperf3 >&2 \
      || log "WARNING: apt-get install iperf3 failed"
  fi
  for p in ip ss iperf3 cmp timeout numfmt awk python3 truncate; do
    command -v "$p" >/dev/null || die "required command not found: $p"
  done
}

# ---- cleanup ----------------------------------------------------------------

cleanup() {
  local rc=$? pid
  set +e
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do [[ $pid == "$EMU_PID" ]] || stop_pid "$pid"; done
  [[ -z $EMU_PID ]] || stop_pid "$EMU_PID" 15
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  delete_our_namespaces
  if ((!CSV_DONE)) && [[ -n $ROWS && -s $ROWS ]]; then
    write_csv "INCOMPLETE: the script stopped early (exit $rc)"
    log "partial results: $CSV"
  fi
  [[ -n $SHM_DIR && -d $SHM_DIR ]] && rm -rf -- "$SHM_DIR"
  [[ -n $TMP_DIR && -d $TMP_DIR ]] && rm -rf -- "$TMP_DIR"
  exit "$rc"
}

# ---- data, keys, servers ----------------------------------------------------
fair_bytes() { # the fairness push: FAIR_SECS at half the link, whole MiB
  awk -v s="$FAIR_SECS" -v r="$LINK_BPS" 'BEGIN { printf "%.0f", int(s * r * 0.5 / 8 / 1048576) * 1048576 }'
}

make_data() {
  local need=$((2 * SIZE_BYTES + 256 * 1024 * 1024))
  # the goodput copy is gone before the fair part makes its file and copy
  local fair_need=$((SIZE_BYTES + 2 * $(fair_bytes) + 256 * 1024 * 1024))
  want fair && ((fair_need > need)) && need=$fair_need
  (($(avail_bytes /dev/shm) > need)) || die "not enough space in /dev/shm (need $need bytes)"
  DATA=$SHM_DIR/data/data.bin
  log "generating $SIZE_BYTES random bytes in $DATA"
  head -c "$SIZE_BYTES" /dev/urandom >"$DATA"
  [[ $(stat -c %s "$DATA") == "$SIZE_BYTES" ]] || die "data file has the wrong size"
}

# make_fair_file: FAIR_FILE of fair_bytes, cut from (copies of) DATA
make_fair_file() {
  local n
  n=$(fair_bytes)
  FAIR_FILE=$SHM_DIR/data/fair.bin
  : >"$FAIR_FILE"
  while (($(stat -c %s "$FAIR_FILE") < n)); do cat "$DATA" >>"$FAIR_FILE"; done
  truncate -s "$n" "$FAIR_FILE"
}

setup_keys() {
  export HAUL_HOME=$TMP_DIR/haul-home
  mkdir -p "$HAUL_HOME"
  timeout 30 "$HAUL" keygen -f "$HAUL_HOME/server.key" </dev/null >/dev/null 2>&1 || die "haul keygen failed"
  timeout 30 "$HAUL" keygen -f "$HAUL_HOME/client.key" </dev/null >/dev/null 2>&1 || die "haul keygen failed"
  [[ -s $HAUL_HOME/client.key.pub ]] || die "haul keygen did not write client.key.pub"
  cp "$HAUL_HOME/client.key.pub" "$HAUL_HOME/authorized_keys"
}

# start_haul_serve NETNS|- LISTEN ROOTDIR
start_haul_serve() {
  local ns=$1 listen=$2 root=$3 pre=() tag=host
  [[ $ns == - ]] || pre=(ip netns exec "$ns") tag=$ns
  HAUL_LOG=$TMP_DIR/haul-serve-$tag-${listen##*:}.log
  start_bg "$HAUL_LOG" "$SERVER_TTL" "${pre[@]}" "$HAUL" serve --root "$root" --listen "$listen" \
    --key "$HAUL_HOME/server.key" --authorized-keys "$HAUL_HOME/authorized_keys"
  HAUL_PID=$BG_PID
  if ! wait_listen "$ns" tcp "${listen##*:}" "$HAUL_PID" "haul serve" "$HAUL_LOG"; then
    stop_pid "$HAUL_PID"; HAUL_PID=""
    return 1
  fi
}

stop_haul_serve() { stop_pid "$HAUL_PID"; HAUL_PID=""; }

# empty_root: the push target lives in ROOT on /dev/shm; nothing stays between runs
empty_root() { find "$ROOT" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null || true; }

# ---- emulator ---------------------------------------------------------------
# start_emulator NAME DELAY_MS LOSS_PCT: haul-netem at LINK_RATE between NAME-a and NAME-b
start_emulator() {
  local name=$1 delay=$2 loss=$3 ready=$TMP_DIR/$1.ready logf=$TMP_DIR/$1.emu.log i args
  EMU_NAME=$name NS_A=$name-a NS_B=$name-b
  for i in "$NS_A" "$NS_B"; do
    ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx -- "$i" && die "namespace $i already exists"
  done
  NS_NAMES+=("$NS_A" "$NS_B")
  rm -f "$ready"
  args=(--name "$name" --rate "$LINK_RATE" --delay "$delay" --ready-file "$ready"
    --stats-json "$TMP_DIR/$name.stats.json" --seed 1 --mtu "$MTU")
  [[ $loss != 0 ]] && args+=(--loss "$loss")
  EMU_DESC="rate $LINK_RATE delay ${delay}ms loss ${loss}% mtu $MTU"
  log "haul-netem ${args[*]}"
  start_bg "$logf" "$SERVER_TTL" "$NETEM" "${args[@]}"
  EMU_PID=$BG_PID
  for ((i = 0; i < 150; i++)); do
    [[ -e $ready ]] && break
    kill -0 "$EMU_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -e $ready ]]; then
    tail -n 20 "$logf" >&2
    log "ERROR: haul-netem did not come up within 15 s"
    stop_emulator
    return 1
  fi
  NS_CC=$(ip netns exec "$NS_A" sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo "?")
}

stop_emulator() {
  if [[ -n $EMU_PID ]]; then
    stop_pid "$EMU_PID" 15
    [[ -s $TMP_DIR/$EMU_NAME.emu.log ]] && grep -h 'a2b\|b2a' "$TMP_DIR/$EMU_NAME.emu.log" | sed 's/^/    /' >&2
    if [[ -s $TMP_DIR/$EMU_NAME.stats.json ]]; then
      echo "emulator $EMU_NAME ($EMU_DESC): $(tr -d '\n' <"$TMP_DIR/$EMU_NAME.stats.json")" >>"$META"
    fi
  fi
  EMU_PID=""
  delete_our_namespaces
}

# ---- results ------------------------------------------------------------------
CSV_HEADER="part,profile,rtt_ms,loss_pct,tool,status,file_bytes,wall_s,goodput_mbit_s,wall_goodput_mbit_s,metric,value,goal,result,resent_frac,resent_goal,resent_result,avg_rate_mbit_s,final_rate_mbit_s,datagram_bytes,datagrams_sent,datagrams_retransmitted,datagrams_lost,receiver_drops,note"
ROW_FIELDS=(part profile rtt loss tool status bytes wall gp wgp metric value goal result rfrac rgoal rresult avg final dgram sent resent lost drops note)
declare -A R=()
row_reset() { local f; for f in "${ROW_FIELDS[@]}"; do R[$f]=""; done; }

tline() { printf '%-8s %-12s %-23s %-7s %8s %8s  %-13s %6s %-9s %-6s %7s %-8s %-6s %s\n' "$@"; }
table_header() {
  tline part profile tool status goodput wall metric value goal result re-sent goal result note
  tline "" "" "" "" Mbit/s Mbit/s "" "" "" "" frac "" "" ""
}

# emit_row: R[...] to the CSV rows file and one table line on stdout
emit_row() {
  local f v vals=() note=${R[note]//\"/\'}
  for f in "${ROW_FIELDS[@]}"; do
    v=${R[$f]}
    if [[ -n $v ]]; then
      case $f in
        wall) v=$(awk -v x="$v" 'BEGIN { printf "%.3f", x }') ;;
        gp | wgp | avg | final) v=$(fmt1 "$v") ;;
      esac
    fi
    [[ $f == note ]] || vals+=("$v")
  done
  { (IFS=,; printf '%s' "${vals[*]}"); printf ',"%s"\n' "$note"; } >>"$ROWS"
  tline "${R[part]}" "${R[profile]}" "${R[tool]}" "${R[status]}" \
    "${R[gp]:+$(fmt1 "${R[gp]}")}" "${R[wgp]:+$(fmt1 "${R[wgp]}")}" "${R[metric]}" "${R[value]}" \
    "${R[goal]}" "${R[result]}" "${R[rfrac]}" "${R[rgoal]}" "${R[rresult]}" "${R[note]}"
}

# verdict VALUE OP GOAL: PASS or FAIL (FAIL when VALUE is empty)
verdict() {
  [[ -n $1 ]] || { echo FAIL; return 0; }
  awk -v v="$1" -v g="$3" -v op="$2" 'BEGIN {
    ok = (op == ">=") ? (v >= g) : (op == "<=") ? (v <= g) : 0; print ok ? "PASS" : "FAIL" }'
}

write_csv() { # write_csv [NOTE]
  local cpu haulver
  cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  haulver=$(timeout 5 "$HAUL" --version 2>/dev/null | head -n 1 || true)
  mkdir -p "$SCRIPT_DIR/out"
  {
    echo "# haul UDP benchmark $STAMP (bench/udp.sh $ARGS_STR)"
    [[ -z ${1:-} ]] || echo "# $1"
    echo "# host: $(uname -n) | kernel $(uname -r) | nproc $(nproc) | cpu $cpu | load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# haul: $HAUL (${haulver:-unknown}) | emulator: $NETEM | link $LINK_RATE | mtu $MTU | namespaces untuned, default cc $NS_CC"
    echo "# size_bytes: $SIZE_BYTES | fair_bytes: $(fair_bytes) | iperf3 -t $IPERF_TIME (goodput ref), $FAIR_T (fair, haul from ${FAIR_START} s) | tcp_cap: $TCP_CAP | parts: ${PARTS[*]} | profiles: ${PROFILES[*]}"
    echo "# goals: goodput/link >= per profile; resent_frac <= loss + $RESENT_SLACK; rate average within +-$RATE_TOL of $RATE_CAP; tcp_share per fair mode (fair_flags)"
    [[ -s $META ]] && sed 's/^/# /' "$META"
    echo "$CSV_HEADER"
    cat "$ROWS"
  } >"$CSV"
}

# ---- haul runs ----------------------------------------------------------------
# parse_haul JSON: H[...] from haul's --json line (empty where absent)
declare -A H=()
HAUL_KEYS=(ok file_bytes goodput_bps duration_s transport error udp.datagram_bytes udp.datagrams_sent
  udp.datagrams_retransmitted udp.datagrams_lost udp.average_rate_bps udp.final_rate_bps udp.receiver_drops
  udp.receive_buffer_bytes)
parse_haul() {
  local out vals=() i
  out=$(json_get "$1" "${HAUL_KEYS[@]/#/.}" 2>/dev/null) || true
  mapfile -t vals <<<"$out"
  H=()
  for i in "${!HAUL_KEYS[@]}"; do H[${HAUL_KEYS[i]}]=${vals[i]:-}; done
}

# run_cap BYTES RATE_BPS RTT_MS: seconds allowed for one transfer:
# 1.5 x the ideal time at RATE_BPS + 15 s + 20 RTTs (handshake, MTU probes, start-up)
run_cap() {
  awk -v b="$1" -v r="$2" -v rtt="$3" 'BEGIN { printf "%d", 1.5 * b * 8 / r + 15 + 20 * rtt / 1000 + 0.999 }'
}

# haul_cp CAP JSON NETNS|- ARGS...: one `haul cp --json`; fills R[status/bytes/wall/gp/wgp/note]
# and the udp columns; the caller verifies the copy
haul_cp() {
  local cap=$1 json=$2 ns=$3 rc=0 err
  shift 3
  client "$cap" "$json" "$ns" "$HAUL" cp --json -q -i "$HAUL_HOME/client.key" \
    --known-hosts "$HAUL_HOME/known_hosts" "$@" || rc=$?
  parse_haul "$json"
  R[wall]=$(calc "$C_T1 - $C_T0")
  case $rc in
    0) R[status]=ok ;;
    124 | 137) R[status]=timeout; R[note]="killed at the ${cap}s cap" ;;
    *)
      R[status]=fail
      err=${H[error]:-$(grep -v '^\s*$' "$json.err" 2>/dev/null | tail -n 1 | cut -c1-160 || true)}
      R[note]="haul exit $rc: $err"
      log "    haul cp failed (exit $rc); its stderr and the server's log:"
      tail -n 5 "$json.err" >&2 || true
      [[ -n $HAUL_LOG ]] && { tail -n 5 "$HAUL_LOG" >&2 || true; }
      ;;
  esac
  if [[ ${R[status]} == ok && ${H[ok]} != true ]]; then R[status]=fail; R[note]="no ok:true in haul --json output"; fi
  R[bytes]=${H[file_bytes]}
  [[ -n ${H[goodput_bps]} ]] && R[gp]=$(calc "${H[goodput_bps]} / 1e6")
  if [[ ${R[status]} == ok && -n ${R[bytes]} ]]; then R[wgp]=$(calc "${R[bytes]} * 8 / ${R[wall]} / 1e6"); fi
  R[dgram]=${H[udp.datagram_bytes]} R[sent]=${H[udp.datagrams_sent]} R[resent]=${H[udp.datagrams_retransmitted]}
  R[lost]=${H[udp.datagrams_lost]} R[drops]=${H[udp.receiver_drops]}
  [[ -n ${H[udp.average_rate_bps]} ]] && R[avg]=$(calc "${H[udp.average_rate_bps]} / 1e6")
  [[ -n ${H[udp.final_rate_bps]} ]] && R[final]=$(calc "${H[udp.final_rate_bps]} / 1e6")
  if [[ -n ${R[sent]} && ${R[sent]} != 0 ]]; then
    R[rfrac]=$(awk -v a="${R[resent]}" -v b="${R[sent]}" 'BEGIN { printf "%.4f", a / b }')
  fi
  return 0
}

# check_transport WANT: a run that did not use WANT fails
check_transport() {
  if [[ ${R[status]} == ok && ${H[transport]} != "$1" ]]; then
    R[status]=fail R[note]="${R[note]:+${R[note]}; }asked --transport $1, haul reports '${H[transport]}'"
  fi
  if [[ -n ${R[drops]} && ${R[drops]} != 0 ]]; then
    R[note]="${R[note]:+${R[note]}; }receiver dropped ${R[drops]} datagrams (buffer ${H[udp.receive_buffer_bytes]} B)"
  fi
}

# push SRC TRANSPORT CAP [FLAGS...]: sets P_BOUND (Mbit/s) to the goodput bound of a stopped run: push SRC into ROOT through the emulator,
# verify it with cmp (untimed), empty ROOT
push() {
  local src=$1 tr=$2 cap=$3 name expected
  shift 3
  name=$(basename "$src")
  expected=$(stat -c %s "$src")
  empty_root
  log "    haul cp --transport $tr $* ($expected bytes, cap ${cap}s)"
  haul_cp "$cap" "$TMP_DIR/haul-$tr.json" "$NS_A" --transport "$tr" "$@" "$src" "$ADDR_B:$HAUL_PORT:$name"
  check_transport "$tr"
  if [[ ${R[status]} == ok ]]; then
    if [[ ${R[bytes]} != "$expected" ]]; then
      R[status]=fail R[note]="${R[note]:+${R[note]}; }file_bytes ${R[bytes]} != $expected"
    elif ! cmp -s -- "$src" "$ROOT/$name"; then
      R[status]=fail R[note]="${R[note]:+${R[note]}; }verification failed (cmp)"
    fi
  fi
  P_BOUND=""
  if [[ ${R[status]} == timeout ]]; then
    P_BOUND=$(calc "$expected * 8 / $cap / 1e6")
    R[note]="${R[note]}; goodput < $(fmt1 "$P_BOUND") Mbit/s"
  fi
  empty_root
  log "    -> ${R[status]}${R[gp]:+, haul $(fmt1 "${R[gp]}") Mbit/s}${R[wgp]:+, wall $(fmt1 "${R[wgp]}") Mbit/s}${R[rfrac]:+, re-sent ${R[rfrac]}}${R[note]:+ (${R[note]})}"
}

# iperf3_ref: one TCP flow a -> b for IPERF_TIME; fills R[gp], R[status]
iperf3_ref() {
  local json=$TMP_DIR/iperf3-ref.json slog=$TMP_DIR/iperf3-ref-s.log spid rc=0 bps
  start_bg "$slog" $((IPERF_TIME + 60)) ip netns exec "$NS_B" iperf3 -s -1 -B "$ADDR_B" -p "$IPERF_PORT"
  spid=$BG_PID
  if ! wait_listen "$NS_B" tcp "$IPERF_PORT" "$spid" "iperf3 -s" "$slog"; then
    stop_pid "$spid"; R[status]=fail R[note]="iperf3 server did not start"; return 0
  fi
  log "    iperf3 -c $ADDR_B -t $IPERF_TIME (1 TCP flow, cc $NS_CC)"
  client $((IPERF_TIME + 40)) "$json" "$NS_A" iperf3 -c "$ADDR_B" -p "$IPERF_PORT" -t "$IPERF_TIME" -J || rc=$?
  wait_exit "$spid" 10 || true
  bps=$(json_get "$json" .end.sum_received.bits_per_second 2>/dev/null || true)
  R[bytes]=$(json_get "$json" .end.sum_received.bytes 2>/dev/null || true)
  if [[ -z $bps ]]; then
    R[status]=fail R[note]="iperf3 exit $rc, no sum_received"
  else
    R[status]=ok R[gp]=$(calc "$bps / 1e6") R[wall]=$IPERF_TIME
  fi
  log "    -> ${R[status]}${R[gp]:+, $(fmt1 "${R[gp]}") Mbit/s}"
}

# ---- parts --------------------------------------------------------------------
frac_link() { calc "$1 * 1e6 / $LINK_BPS"; }
f1or() { if [[ -n $1 ]]; then fmt1 "$1"; else printf '%s' "$2"; fi; }   # f1or VALUE FALLBACK
fmt3() { awk -v x="$1" 'BEGIN { printf "%.3f", x }'; }

part_goodput() {
  local p name delay loss goal rtt idx=0 cap tool rgoal
  for p in "${ALL_PROFILES[@]}"; do
    IFS='|' read -r name delay loss goal <<<"$p"
    printf '%s\n' "${PROFILES[@]}" | grep -qx -- "$name" || continue
    idx=$((idx + 1))
    rtt=$((2 * delay))
    log "== goodput / $name: $LINK_RATE, RTT $rtt ms, loss $loss %"
    if ! start_emulator "hu$$g$idx" "$delay" "$loss" || ! start_haul_serve "$NS_B" "$ADDR_B:$HAUL_PORT" "$ROOT"; then
      stop_emulator
      for tool in haul-udp haul-tcp iperf3; do
        row_reset
        R[part]=goodput R[profile]=$name R[rtt]=$rtt R[loss]=$loss R[tool]=$tool R[status]=fail
        R[note]="emulator or haul serve did not start"
        [[ $tool == haul-udp ]] && R[metric]=goodput/link R[goal]=">=$goal" R[result]=FAIL
        emit_row
      done
      GP_SUM+=("$name|$rtt|$loss|not run|-|-|-|>=$goal|FAIL|-|-|FAIL")
      continue
    fi
    cap=$(run_cap "$SIZE_BYTES" "$LINK_BPS" "$rtt")
    rgoal=$(awk -v l="$loss" -v s="$RESENT_SLACK" 'BEGIN { printf "%.4f", l / 100 + s }')

    row_reset
    R[part]=goodput R[profile]=$name R[rtt]=$rtt R[loss]=$loss R[tool]=haul-udp
    push "$DATA" udp "$cap"
    R[metric]=goodput/link R[goal]=">=$goal"
    if [[ ${R[status]} == ok ]]; then R[value]=$(fmt3 "$(frac_link "${R[gp]}")"); fi
    R[result]=$(verdict "${R[value]}" ">=" "$goal")
    R[rgoal]="<=$rgoal"
    [[ ${R[status]} == ok ]] && R[rresult]=$(verdict "${R[rfrac]}" "<=" "$rgoal")
    [[ ${R[status]} == ok ]] || R[rresult]=FAIL
    emit_row
    local udp_val=${R[value]:-${R[status]}} udp_res=${R[result]} udp_rf=${R[rfrac]:--} udp_rres=${R[rresult]}
    local udp_wall=${R[wgp]:+$(fmt3 "$(frac_link "${R[wgp]}")")}
    [[ -n $P_BOUND ]] && udp_val="<$(fmt3 "$(frac_link "$P_BOUND")")"

    row_reset
    R[part]=goodput R[profile]=$name R[rtt]=$rtt R[loss]=$loss R[tool]=haul-tcp
    if ((TCP_CAP > 0 && TCP_CAP < cap)); then push "$DATA" tcp "$TCP_CAP"; else push "$DATA" tcp "$cap"; fi
    R[metric]=goodput/link
    if [[ ${R[status]} == ok ]]; then R[value]=$(fmt3 "$(frac_link "${R[gp]}")"); fi
    emit_row
    local tcp_val=${R[value]:-${R[status]}}
    [[ -n $P_BOUND ]] && tcp_val="<$(fmt3 "$(frac_link "$P_BOUND")")"

    row_reset
    R[part]=goodput R[profile]=$name R[rtt]=$rtt R[loss]=$loss R[tool]=iperf3-1flow
    iperf3_ref
    R[metric]=goodput/link
    if [[ ${R[status]} == ok ]]; then R[value]=$(fmt3 "$(frac_link "${R[gp]}")"); fi
    R[note]="${R[note]:+${R[note]}; }memory to memory, -t $IPERF_TIME, cc $NS_CC"
    emit_row
    local ip_val=${R[value]:-${R[status]}}

    stop_haul_serve
    stop_emulator
    GP_SUM+=("$name|$rtt|$loss|$udp_val|${udp_wall:--}|$tcp_val|$ip_val|>=$goal|$udp_res|$udp_rf|<=$rgoal|$udp_rres")
  done
}

part_rate() {
  local cap lo hi dev
  log "== rate: --rate $RATE_CAP, $LINK_RATE, RTT 150 ms, loss 0 %"
  row_reset
  R[part]=rate R[profile]=loss0 R[rtt]=150 R[loss]=0 R[tool]=haul-udp-$RATE_CAP
  R[metric]="avg_rate/$RATE_CAP" R[goal]="1+-$RATE_TOL"
  if start_emulator "hu$$r" 75 0 && start_haul_serve "$NS_B" "$ADDR_B:$HAUL_PORT" "$ROOT"; then
    cap=$(run_cap "$SIZE_BYTES" "$RATE_CAP_BPS" 150)
    push "$DATA" udp "$cap" --rate "$RATE_CAP"
    if [[ ${R[status]} == ok && -n ${R[avg]} ]]; then
      R[value]=$(fmt3 "$(calc "${R[avg]} * 1e6 / $RATE_CAP_BPS")")
      dev=$(calc "${R[value]} - 1")
      R[result]=$(awk -v d="$dev" -v t="$RATE_TOL" 'BEGIN { print (d <= t && -d <= t) ? "PASS" : "FAIL" }')
    else
      R[result]=FAIL
    fi
  else
    R[status]=fail R[note]="emulator or haul serve did not start" R[result]=FAIL
  fi
  stop_haul_serve
  stop_emulator
  emit_row
  lo=$(awk -v r="$RATE_CAP_BPS" -v t="$RATE_TOL" 'BEGIN { printf "%.0f", r * (1 - t) / 1e6 }')
  hi=$(awk -v r="$RATE_CAP_BPS" -v t="$RATE_TOL" 'BEGIN { printf "%.0f", r * (1 + t) / 1e6 }')
  SUMMARY+=("--rate $RATE_CAP: average rate Mbit/s (goodput ${R[gp]:+$(fmt1 "${R[gp]}")})|$(f1or "${R[avg]}" "${R[status]}")|$lo..$hi|${R[result]}")
}

# fair_stats SERVER_JSON CLIENT_JSON OFF0 OFF1: iperf3 per-second intervals ->
# "during|n|before|after" in bit/s: the mean over intervals inside [OFF0, OFF1]
# (haul's run, in the flow's own clock), before it, and from OFF1 + 1 s on
fair_stats() {
  python3 - "$@" <<'PY'
import json, sys

def intervals(path):
    try:
        text = open(path).read()
    except OSError:
        return []
    dec, i, objs = json.JSONDecoder(), 0, []
    while True:
        j = text.find("{", i)
        if j < 0:
            break
        try:
            o, i = dec.raw_decode(text, j)
            objs.append(o)
        except ValueError:
            i = j + 1
    for o in reversed(objs):
        if isinstance(o, dict) and o.get("intervals"):
            return [(iv["sum"]["start"], iv["sum"]["end"], iv["sum"]["bits_per_second"])
                    for iv in o["intervals"] if "sum" in iv]
    return []

ivs = intervals(sys.argv[1]) or intervals(sys.argv[2])  # receiver side first
off0, off1 = float(sys.argv[3]), float(sys.argv[4])
mean = lambda xs: "%.0f" % (sum(xs) / len(xs)) if xs else ""
during = [b for s, e, b in ivs if s >= off0 - 0.25 and e <= off1 + 0.25]
if not during:  # short overlap: intervals whose middle lies inside it
    during = [b for s, e, b in ivs if off0 <= (s + e) / 2 <= off1]
before = [b for s, e, b in ivs if e <= off0 + 0.25 and s >= 1]
after = [b for s, e, b in ivs if s >= off1 + 1]
print("|".join([mean(during), str(len(during)), mean(before), mean(after)]))
PY
}

# fair_flags MODE: haul's options and the goal for the other flows' share
# (FAIR_FLOWS of them: N/(N+1) +- 0.1 under --fair on)
fair_flags() {
  local fair
  fair=$(awk -v n="$FAIR_FLOWS" 'BEGIN { s = n / (n + 1); printf "%.2f..%.2f", s - 0.1, s + 0.1 }')
  case $1 in
    default) echo "udp|--fair on|$fair" ;;
    background) echo "udp|--background|0.9.." ;;
    tcp) echo "tcp|--fair on|$fair" ;;
    tcp-first) echo "tcp|--fair on|$fair" ;;
    tcp-background) echo "tcp|--background|0.9.." ;;
    off) echo "udp|--fair off|-" ;;
    cubic) echo "cubic|-C $FAIR_CC|$fair" ;;
    *) die "unknown fair mode: $1 (default, background, tcp, tcp-first, tcp-background, off, cubic)" ;;
  esac
}

# in_goal VALUE GOAL: GOAL like 0.4..0.6, 0.9.. or -
in_goal() {
  [[ $2 == - ]] && { echo "-"; return; }
  awk -v v="$1" -v g="$2" 'BEGIN { split(g, a, /\.\./); lo = a[1]; hi = a[2];
    ok = (v >= lo) && (hi == "" || v <= hi); print ok ? "PASS" : "FAIL" }'
}

# join_flow: the yardstick for a fair share, one more iperf3 flow of
# FAIR_CC in haul's place, for as long as haul's pushes take
# (FAIR_SECS); fills R[gp], R[status] and C_T0/C_T1
join_flow() {
  local slog=$TMP_DIR/iperf3-join-s.log json=$TMP_DIR/iperf3-join.json spid rc=0 bps port=$((IPERF_PORT + 1))
  R[tool]=iperf3-$FAIR_CC-joining
  start_bg "$slog" $((FAIR_SECS + 60)) ip netns exec "$NS_B" iperf3 -s -1 -B "$ADDR_B" -p "$port"
  spid=$BG_PID
  if ! wait_listen "$NS_B" tcp "$port" "$spid" "iperf3 -s" "$slog"; then
    stop_pid "$spid"; R[status]=fail R[note]="joining iperf3 server did not start"; return 0
  fi
  log "    iperf3 -c $ADDR_B -t $FAIR_SECS -C $FAIR_CC (one more flow, in haul's place)"
  client $((FAIR_SECS + 40)) "$json" "$NS_A" iperf3 -c "$ADDR_B" -p "$port" -t "$FAIR_SECS" -C "$FAIR_CC" -J || rc=$?
  wait_exit "$spid" 10 || true
  bps=$(json_get "$json" .end.sum_received.bits_per_second 2>/dev/null || true)
  if [[ -z $bps ]]; then
    R[status]=fail R[note]="joining iperf3 exit $rc, no sum_received"
  else
    R[status]=ok R[gp]=$(calc "$bps / 1e6")
  fi
}

part_fair() {
  local mode
  IFS=, read -r -a modes <<<"$FAIR_MODES"
  for mode in "${modes[@]}"; do fair_mode "$mode"; done
}

fair_mode() {
  local mode=$1 spid cpid slog=$TMP_DIR/iperf3-fair-s.json cjson=$TMP_DIR/iperf3-fair-c.json t_i0 t_h0 t_h1 setup
  local off0 off1 during n before after hrow_gp="" solo="" tr flags goal hshare=""
  IFS='|' read -r tr flags goal <<<"$(fair_flags "$mode")"
  log "== fair ($mode): $FAIR_FLOWS iperf3 $FAIR_CC flow(s) (-t $FAIR_T) + haul push ($tr $flags) from ${FAIR_START} s, $LINK_RATE, RTT 150 ms"
  make_fair_file
  row_reset
  R[part]=fair-$mode R[profile]=loss0 R[rtt]=150 R[loss]=0 R[tool]=haul-$tr
  local ok=1
  if ! start_emulator "hu$$f" 75 0 || ! start_haul_serve "$NS_B" "$ADDR_B:$HAUL_PORT" "$ROOT"; then ok=0; fi
  if ((ok)); then
    # Both flows get room to fill the link alone (tcp_rmem/tcp_wmem are per
    # namespace; a fresh one caps a flow near 190 Mbit/s at 150 ms).
    local ns
    for ns in "$NS_A" "$NS_B"; do
      ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_rmem="4096 131072 134217728" \
        net.ipv4.tcp_wmem="4096 131072 134217728" || log "WARN: could not raise TCP buffers in $ns"
    done
    # Over TCP the streams judge a flow beside them by how much of the
    # path they lost, which a path measured alone tells (P-46): one solo
    # push first, as any earlier transfer to the host leaves (not recorded).
    # tcp-first: a first transfer to the host, the path unknown.
    if [[ $mode == tcp-first ]]; then
      rm -rf -- "${HAUL_HOME:?}/known-paths"
    elif [[ $tr == tcp ]]; then
      log "    warm-up: a solo push, so that the path is known"
      push "$FAIR_FILE" udp 60
      row_reset
      R[part]=fair-$mode R[profile]=loss0 R[rtt]=150 R[loss]=0 R[tool]=haul-$tr
    fi
    start_bg "$slog" $((FAIR_T + 90)) ip netns exec "$NS_B" iperf3 -s -1 -J -B "$ADDR_B" -p "$IPERF_PORT"
    spid=$BG_PID
    wait_listen "$NS_B" tcp "$IPERF_PORT" "$spid" "iperf3 -s" "$slog" || { stop_pid "$spid"; ok=0; }
  fi
  if ((ok)); then
    log "    iperf3 -c $ADDR_B -t $FAIR_T -i 1 -J -C $FAIR_CC -P $FAIR_FLOWS"
    t_i0=$(now)
    start_bg "$cjson" $((FAIR_T + 60)) ip netns exec "$NS_A" iperf3 -c "$ADDR_B" -p "$IPERF_PORT" \
      -t "$FAIR_T" -i 1 -J -C "$FAIR_CC" -P "$FAIR_FLOWS"
    cpid=$BG_PID
    sleep "$(awk -v s="$FAIR_START" -v t0="$t_i0" -v t="$(now)" 'BEGIN { d = s - (t - t0); printf "%.2f", (d > 0) ? d : 0 }')"
    if [[ $tr == cubic ]]; then
      join_flow
    else
      # shellcheck disable=SC2086 # flags are two words
      push "$FAIR_FILE" "$tr" $((FAIR_T + 60)) $flags
    fi
    t_h0=$C_T0 t_h1=$C_T1
    hrow_gp=${R[gp]}
    R[metric]=goodput/link
    [[ ${R[status]} == ok ]] && R[value]=$(fmt3 "$(frac_link "${R[gp]}")")
    R[note]="${R[note]:+${R[note]}; }sharing the link with the iperf3 flow; $flags"
    wait_exit "$cpid" $((FAIR_T + 30)) || true
    wait_exit "$spid" 15 || true
    # the flow's clock starts after its control and data connections: ~3 RTTs
    setup=0.45
    off0=$(calc "$t_h0 - $t_i0 - $setup") off1=$(calc "$t_h1 - $t_i0 - $setup")
    # Only while both run: haul may outlast the flow (--background).
    awk -v a="$off1" -v t="$FAIR_T" 'BEGIN { exit !(a > t - 1) }' && off1=$((FAIR_T - 1))
    IFS='|' read -r during n before after <<<"$(fair_stats "$slog" "$cjson" "$off0" "$off1")"
  else
    R[status]=fail R[note]="emulator, haul serve or iperf3 server did not start"
  fi
  stop_haul_serve
  stop_emulator
  rm -f -- "$FAIR_FILE"
  emit_row
  row_reset
  R[part]=fair-$mode R[profile]=loss0 R[rtt]=150 R[loss]=0 R[tool]=iperf3-$FAIR_CC R[metric]=tcp_share
  R[goal]=$goal
  if [[ -n ${during:-} ]]; then
    R[status]=ok R[gp]=$(calc "$during / 1e6") R[value]=$(fmt3 "$(calc "$during / $LINK_BPS")")
    R[wall]=$FAIR_T
    [[ -n $after ]] && solo=$(fmt3 "$(calc "$after / $LINK_BPS")")
    [[ -n $before ]] && hshare=$(fmt3 "$(calc "($before - $during) / $LINK_BPS")")
    R[note]="mean of $n 1-s intervals while both ran ($(fmt1 "$off0")..$(fmt1 "$off1") s)"
    R[note]+="; alone before haul $(fmt1 "$(calc "${before:-0} / 1e6")") Mbit/s${after:+, after $(fmt1 "$(calc "$after / 1e6")") Mbit/s}"
    R[note]+="; haul took about ${hshare:-?} of the link (what the flow gave up)"
  else
    R[status]=fail R[note]="no iperf3 intervals during haul's run"
  fi
  R[result]=$(in_goal "${R[value]:-0}" "$goal")
  emit_row
  local who=haul
  [[ $tr == cubic ]] && who="the joining flow"
  SUMMARY+=("fair ($mode, $flags): $FAIR_CC's share while $who ran ($who took ~${hshare:-?}; $(f1or "$hrow_gp" -) Mbit/s over its run)|${R[value]:-${R[status]}}|$goal|${R[result]}")
}

part_loopback() {
  local enc tr flags cap udp_gp tcp_gp line=""
  log "== loopback: pull $SIZE_BYTES bytes to /dev/null over 127.0.0.1"
  LO_PORT=$(free_port)
  if ! start_haul_serve - "127.0.0.1:$LO_PORT" "$SHM_DIR/data"; then
    row_reset
    R[part]=loopback R[profile]=127.0.0.1 R[tool]=haul R[status]=fail R[note]="haul serve did not start"
    emit_row
    return 0
  fi
  cap=$(run_cap "$SIZE_BYTES" 200000000 0)
  for enc in encrypted no-encrypt; do
    flags=()
    [[ $enc == no-encrypt ]] && flags=(--no-encrypt)
    udp_gp="" tcp_gp=""
    for tr in tcp udp; do
      row_reset
      R[part]=loopback R[profile]=127.0.0.1 R[rtt]=0 R[loss]=0 R[tool]=haul-$tr-$enc
      log "    haul cp --transport $tr ${flags[*]} 127.0.0.1:$LO_PORT:data.bin /dev/null (cap ${cap}s)"
      haul_cp "$cap" "$TMP_DIR/lo-$tr-$enc.json" - --transport "$tr" "${flags[@]}" \
        "127.0.0.1:$LO_PORT:data.bin" /dev/null
      check_transport "$tr"
      if [[ ${R[status]} == ok && ${R[bytes]} != "$SIZE_BYTES" ]]; then
        R[status]=fail R[note]="file_bytes ${R[bytes]} != $SIZE_BYTES"
      fi
      [[ ${R[status]} == ok ]] || R[gp]=""
      if [[ $tr == tcp ]]; then
        tcp_gp=${R[gp]}
      else
        udp_gp=${R[gp]}
        if [[ -n $udp_gp && -n $tcp_gp ]]; then R[metric]=udp/tcp R[value]=$(fmt3 "$(calc "$udp_gp / $tcp_gp")"); fi
      fi
      log "    -> ${R[status]}${R[gp]:+, $(fmt1 "${R[gp]}") Mbit/s}${R[note]:+ (${R[note]})}"
      emit_row
    done
    line="udp $(f1or "$udp_gp" n/a) vs tcp $(f1or "$tcp_gp" n/a) Mbit/s"
    SUMMARY+=("loopback $enc: goodput udp vs tcp|$line|-|-")
  done
  stop_haul_serve
}

summary() {
  local s f=()
  printf '\nsummary\n'
  if ((${#GP_SUM[@]})); then
    printf '\ngoodput / link (%s; haul: its goodput_bps; wall: file bytes / wall time of the command)\n' "$LINK_RATE"
    printf '%-13s %6s %6s  %8s %8s %8s %8s  %-7s %-6s  %8s %-8s %-6s\n' profile "RTT ms" "loss %" \
      udp "(wall)" tcp iperf3 goal result re-sent goal result
    for s in "${GP_SUM[@]}"; do
      IFS='|' read -r -a f <<<"$s"
      printf '%-13s %6s %6s  %8s %8s %8s %8s  %-7s %-6s  %8s %-8s %-6s\n' "${f[@]}"
    done
  fi
  if ((${#SUMMARY[@]})); then
    printf '\n%-72s %-22s %-10s %s\n' claim measured goal result
    for s in "${SUMMARY[@]}"; do
      IFS='|' read -r -a f <<<"$s"
      printf '%-72s %-22s %-10s %s\n' "${f[@]}"
    done
  fi
}

main() {
  local p
  STAMP=$(date +%Y%m%d-%H%M%S)
  ARGS_STR="$*"
  parse_args "$@"
  ((EUID == 0)) || die "udp.sh must run as root (it creates network namespaces and TUN devices); try: sudo $0 $*"
  [[ -x $HAUL ]] || die "haul not found at $HAUL (build it: cargo build --release, or set HAUL=)"
  if want goodput || want rate || want fair; then
    [[ -x $NETEM ]] || die "haul-netem not found at $NETEM (build it: cargo build --release -p netem, or set NETEM=)"
  fi
  ensure_packages
  T_START=$(now)
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  SHM_DIR=$(mktemp -d /dev/shm/haul-udp.XXXXXX)
  TMP_DIR=$(mktemp -d /tmp/haul-udp.XXXXXX)
  ROOT=$SHM_DIR/root
  mkdir -p "$SHM_DIR/data" "$ROOT" "$SCRIPT_DIR/out"
  ROWS=$TMP_DIR/rows.csv META=$TMP_DIR/meta CSV=$SCRIPT_DIR/out/udp-$STAMP.csv
  : >"$ROWS"
  : >"$META"
  make_data
  setup_keys
  printf 'haul UDP benchmark %s: %s -> %s, %s link, MTU %s, file %s bytes, parts %s\n\n' \
    "$STAMP" "$ADDR_A" "$ADDR_B" "$LINK_RATE" "$MTU" "$SIZE_BYTES" "${PARTS[*]}"
  table_header
  for p in "${ALL_PARTS[@]}"; do
    want "$p" || continue
    "part_$p"
  done
  summary
  write_csv
  CSV_DONE=1
  printf '\nCSV: %s\n' "$CSV"
  log "done in $(awk -v t0="$T_START" -v t="$(now)" 'BEGIN { printf "%d", t - t0 }') s"
}

main "$@"
