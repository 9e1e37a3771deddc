#!/usr/bin/env bash
# bench/loopback.sh: loopback (127.0.0.1) throughput benchmark for haul.
#
# Memory-to-memory: haul (encrypted / --no-encrypt) vs iperf3 (and iperf3 -F,
#                   which reads the file it sends).
# File-to-file:     haul push vs nc (as is, and with an fsync of the copy
#                   timed, as haul's is) vs socat over TLS 1.3 AES-256-GCM
#                   vs scp, /dev/shm source -> /tmp (disk) target.
# Small files:      haul pushes a tree of small files and one file of the
#                   same size in turn (issue 43: the tree >= 0.9 of the
#                   file), beside tar | nc and a local cp of each.
#
# See bench/README.md. Run `bench/loopback.sh --help` for options.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
HAUL=${HAUL:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target/release/haul}
IPERF_TIME=${IPERF_TIME:-10}          # seconds per iperf3 run
SERVER_TTL=${SERVER_TTL:-7200}        # hard upper bound on any background server
PACKAGES=(iperf3 netcat-openbsd openssh-server openssh-client rsync pigz zstd socat openssl)

# ---- options ----------------------------------------------------------------
SIZE_ARG=""
REPS=""
STREAMS=4
ONLY=all
QUICK=0
TREE_FILES=20000
TREE_MIN=4096
TREE_MAX=262144

# ---- state ------------------------------------------------------------------
SHM_DIR=""
TMP_DIR=""
DATA=""
SIZE_BYTES=0
XFER_TIMEOUT=0
PIDS=()          # background processes this script started (and only those)
BG_PID=""        # set by start_bg
HAUL_OK=0
NC=nc
JSON_TOOL=""
CG_MODE="" CG_BASE="" CG_HOME="" CG_ROOT=""   # CPU accounting (cg_setup)
# result rows (parallel arrays)
R_GROUP=() R_TOOL=() R_MODE=() R_STREAMS=() R_GOODPUT=() R_WALL=() R_REPORTED=() R_CPU=() R_SAMPLES=()

usage() {
  cat <<EOF
Usage: $0 [options]

Loopback throughput benchmark: haul vs iperf3 (memory-to-memory) and
haul vs nc vs scp (file-to-file, /dev/shm -> /tmp). Reports medians.

Options:
  --quick          512 MiB file, 1 repetition (explicit --size/--reps still win)
  --size SIZE      test file size, binary units: 2G, 512M, 2GiB, or bytes (default 2G)
  --reps N         repetitions per measurement, median reported (default 3; quick 1)
  --streams N      haul / iperf3 parallel streams (default 4)
  --only mem|file|tree
                   run only the memory-to-memory, the file-to-file or the
                   small-files part (tree is not part of the default run)
  --tree-files N   files in the tree (default 20000, sizes uniform in 4-256 KiB,
                   200 to a directory); the tree part compares it with one file
                   of the same total size, pushed in turn, with tar | nc, and
                   with cp -r and cp of the one file on this host (what the
                   file system allows a tree)
  -h, --help       this help

Environment:
  HAUL=PATH        haul binary (default target/release/haul beside this script);
                   if missing, haul rows are skipped with a warning
  IPERF_TIME=S     iperf3 -t duration (default 10)

Output: table on stdout, progress on stderr, CSV in $SCRIPT_DIR/out/.
CPU s/GB: user+sys of both ends (every process this script starts, read from
a cgroup of its own) per 10^9 bytes moved, during the transfer only.
EOF
}

# ---- small helpers (log, die, now, calc, fmt1, median, to_bytes, in_range,
# json_get, pkg_installed, avail_bytes live in lib.sh) ---------------------
# bounded SECS CMD...: run a foreground command with a hard time limit; it stays
# in our process group so Ctrl-C reaches it.
bounded() {
  local secs=$1
  shift
  timeout --foreground --kill-after=5 "$secs" "$@"
}

# start_bg STDOUT STDERR CMD...: start CMD in the background (stdin /dev/null),
# bounded by SERVER_TTL; record its PID in PIDS and BG_PID.
start_bg() {
  local out=$1 err=$2
  shift 2
  if [[ $out == "$err" ]]; then
    timeout --kill-after=5 "$SERVER_TTL" "$@" </dev/null >"$out" 2>&1 &
  else
    timeout --kill-after=5 "$SERVER_TTL" "$@" </dev/null >"$out" 2>"$err" &
  fi
  BG_PID=$!
  PIDS+=("$BG_PID")
}


# stop_pid PID: TERM, wait up to 3 s, then KILL. Only for PIDs we started.
stop_pid() {
  local pid=$1 i
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null || true
  forget_pid "$pid"
}

# wait_exit PID SECS: wait for a background PID to exit on its own; returns its status.
wait_exit() {
  local pid=$1 secs=$2 i rc=0
  for ((i = 0; i < secs * 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$pid" 2>/dev/null && { stop_pid "$pid"; return 124; }
  wait "$pid" || rc=$?
  forget_pid "$pid"
  return "$rc"
}

is_listening() { [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

# free_port: random unused high TCP port on this host
free_port() {
  local p i
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 40000))
    is_listening "$p" || { echo "$p"; return 0; }
  done
  die "no free port found"
}

# wait_listen PORT PID WHAT [LOG]: wait (<= 10 s) until PORT is in LISTEN state.
# Checks the socket table rather than connecting, so one-shot servers
# (iperf3 -1, nc -l) are not consumed by the probe.
wait_listen() {
  local port=$1 pid=$2 what=$3 logf=${4:-} i
  for ((i = 0; i < 100; i++)); do
    is_listening "$port" && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      [[ -n $logf && -s $logf ]] && tail -n 20 "$logf" >&2
      die "$what exited before listening on 127.0.0.1:$port"
    fi
    sleep 0.1
  done
  [[ -n $logf && -s $logf ]] && tail -n 20 "$logf" >&2
  die "$what not listening on 127.0.0.1:$port after 10 s"
}

warm_cache() { cat "$DATA" >/dev/null; }

verify_copy() { # verify_copy OUT WHAT
  [[ -f $1 ]] || die "$2: output $1 missing"
  cmp -s -- "$DATA" "$1" || die "$2: output $1 differs from source (size $(stat -c %s "$1"), expected $SIZE_BYTES)"
}

add_row() { # group tool mode streams goodput wall reported cpu samples...
  R_GROUP+=("$1") R_TOOL+=("$2") R_MODE+=("$3") R_STREAMS+=("$4")
  R_GOODPUT+=("$5") R_WALL+=("$6") R_REPORTED+=("$7") R_CPU+=("$8")
  shift 8
  local IFS=';'
  R_SAMPLES+=("$*")
  log "  -> ${R_TOOL[-1]} ${R_MODE[-1]}: median $(fmt1 "${R_GOODPUT[-1]}") Mbit/s"
}

# ---- CPU accounting ---------------------------------------------------------
# This script moves itself into a cgroup of its own, so every process it
# starts (servers, clients, sshd and their children) is counted there; CPU
# is read just before and just after each transfer, so the data generation,
# cache warming and cmp between them are not.
cg_setup() {
  read -r CG_MODE CG_BASE <<<"$(cg_base)"
  if [[ -z $CG_MODE ]]; then
    log "WARNING: no writable cgroup (cpuacct v1 or v2); CPU columns will be empty"
    return 0
  fi
  # Where this script was, to go back before the cgroup is removed.
  if [[ $CG_MODE == v1 ]]; then
    CG_HOME=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ { print $3; exit }' /proc/self/cgroup)
  else
    CG_HOME=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
  fi
  CG_ROOT=$CG_BASE/haul-loopback-$$
  if ! mkdir "$CG_ROOT" 2>/dev/null || ! echo $$ >"$CG_ROOT/cgroup.procs" 2>/dev/null; then
    log "WARNING: cannot use a cgroup under $CG_BASE; CPU columns will be empty"
    rmdir "$CG_ROOT" 2>/dev/null || true
    CG_MODE="" CG_ROOT=""
    return 0
  fi
  log "CPU accounting: cgroup $CG_MODE at $CG_ROOT"
}

cg_usage() { [[ -z $CG_MODE ]] || cg_read "$CG_MODE" "$CG_ROOT"; }

cg_cleanup() {
  [[ -n $CG_ROOT && -d $CG_ROOT ]] || return 0
  local i
  echo $$ >"$CG_BASE${CG_HOME%/}/cgroup.procs" 2>/dev/null || echo $$ >"$CG_BASE/cgroup.procs" 2>/dev/null
  for ((i = 0; i < 30; i++)); do
    rmdir "$CG_ROOT" 2>/dev/null && return 0
    sleep 0.1
  done
  log "WARNING: could not remove $CG_ROOT (processes left in it?)"
}

# ---- setup ------------------------------------------------------------------
parse_args() {
  while (($#)); do
    case $1 in
      --quick) QUICK=1 ;;
      --size) SIZE_ARG=${2:?--size needs a value}; shift ;;
      --size=*) SIZE_ARG=${1#*=} ;;
      --reps) REPS=${2:?--reps needs a value}; shift ;;
      --reps=*) REPS=${1#*=} ;;
      --streams) STREAMS=${2:?--streams needs a value}; shift ;;
      --streams=*) STREAMS=${1#*=} ;;
      --only) ONLY=${2:?--only needs a value}; shift ;;
      --only=*) ONLY=${1#*=} ;;
      --tree-files) TREE_FILES=${2:?--tree-files needs a value}; shift ;;
      --tree-files=*) TREE_FILES=${1#*=} ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown option: $1" ;;
    esac
    shift
  done
  ((QUICK)) && { : "${SIZE_ARG:=512M}"; : "${REPS:=1}"; }
  : "${SIZE_ARG:=2G}" "${REPS:=3}"
  in_range "$REPS" 1 1000 || die "--reps must be an integer 1..1000"
  in_range "$STREAMS" 1 128 || die "--streams must be an integer 1..128"
  REPS=$((10#$REPS)) STREAMS=$((10#$STREAMS))
  [[ $ONLY =~ ^(all|mem|file|tree)$ ]] || die "--only must be mem, file or tree"
  in_range "$TREE_FILES" 1 1000000 || die "--tree-files must be an integer 1..1000000"
  TREE_FILES=$((10#$TREE_FILES))
  SIZE_BYTES=$(to_bytes "$SIZE_ARG")
  in_range "$SIZE_BYTES" 1 $((1 << 50)) || die "bad --size: $SIZE_ARG"
  # generous bound per transfer: 60 s + size at 8 MiB/s
  XFER_TIMEOUT=$((60 + SIZE_BYTES / (8 * 1024 * 1024)))
}

ensure_packages() {
  local p missing=()
  if command -v dpkg-query >/dev/null; then
    for p in "${PACKAGES[@]}"; do pkg_installed "$p" || missing+=("$p"); done
  fi
  if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get"
    ((EUID == 0)) || die "missing packages (${missing[*]}); run as root or install them"
    log "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive bounded 600 apt-get update -qq
    DEBIAN_FRONTEND=noninteractive bounded 900 apt-get install -y -qq "${missing[@]}" >&2
  fi
  for p in iperf3 ssh scp ssh-keygen cmp ss timeout numfmt awk; do
    command -v "$p" >/dev/null || die "required command not found: $p"
  done
  [[ -x /usr/sbin/sshd ]] || die "/usr/sbin/sshd not found"
  # nc must be the OpenBSD variant (-N); prefer its explicit name.
  if [[ -x /bin/nc.openbsd ]]; then NC=/bin/nc.openbsd; fi
  "$NC" -h 2>&1 | grep -q OpenBSD || die "$NC is not OpenBSD netcat (need netcat-openbsd)"
  if command -v python3 >/dev/null; then JSON_TOOL=python3
  elif command -v jq >/dev/null; then JSON_TOOL=jq
  else die "need python3 or jq to parse JSON"; fi
}

cleanup() {
  local rc=$? pid
  set +e
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  cg_cleanup
  [[ -n $SHM_DIR && -d $SHM_DIR ]] && rm -rf -- "$SHM_DIR"
  [[ -n $TMP_DIR && -d $TMP_DIR ]] && rm -rf -- "$TMP_DIR"
  exit "$rc"
}

make_dirs_and_data() {
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  SHM_DIR=$(mktemp -d /dev/shm/haul-bench.XXXXXX)
  TMP_DIR=$(mktemp -d /tmp/haul-bench.XXXXXX)
  mkdir -p "$SHM_DIR/data"
  (($(avail_bytes /dev/shm) > SIZE_BYTES + 64 * 1024 * 1024)) || die "not enough space in /dev/shm"
  (($(avail_bytes "$TMP_DIR") > SIZE_BYTES + 64 * 1024 * 1024)) || die "not enough space in /tmp"
  DATA=$SHM_DIR/data/data.bin
  [[ $ONLY == tree ]] && make_tree
  log "generating $SIZE_BYTES random bytes in $DATA"
  head -c "$SIZE_BYTES" /dev/urandom >"$DATA"
  [[ $(stat -c %s "$DATA") == "$SIZE_BYTES" ]] || die "data file has the wrong size"
}

# make_tree: TREE_FILES files of random bytes (TREE_MIN..TREE_MAX, 200 to a
# directory) in $SHM_DIR/tree; SIZE_BYTES becomes their total, so that the
# one file made next is the same size.
make_tree() {
  TREE=$SHM_DIR/tree
  log "generating a tree of $TREE_FILES files in $TREE"
  SIZE_BYTES=$(python3 - "$TREE" "$TREE_FILES" "$TREE_MIN" "$TREE_MAX" <<'PY'
import os, random, sys
root, n, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(43)
total = 0
for i in range(n):
    d = os.path.join(root, f"d{i // 200:04d}")
    if i % 200 == 0:
        os.makedirs(d, exist_ok=True)
    size = rng.randint(lo, hi)
    with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
        f.write(os.urandom(size))
    total += size
print(total)
PY
  ) || die "could not make the tree"
  (($(avail_bytes /dev/shm) > SIZE_BYTES + 64 * 1024 * 1024)) || die "not enough space in /dev/shm"
  (($(avail_bytes "$TMP_DIR") > 3 * (REPS + 1) * SIZE_BYTES)) || die "not enough space in /tmp for the copies of $REPS reps"
  XFER_TIMEOUT=$((60 + SIZE_BYTES / (8 * 1024 * 1024)))
}

# ---- haul -------------------------------------------------------------------
HAUL_HOME_DIR=""
HAUL_PORT=""
HAUL_PID=""
HAUL_LOG=""

setup_haul() {
  if [[ ! -x $HAUL ]]; then
    log "WARNING: haul binary not found at $HAUL; haul rows will be SKIPPED"
    return 0
  fi
  HAUL_HOME_DIR=$TMP_DIR/haul-home
  mkdir -p "$HAUL_HOME_DIR"
  export HAUL_HOME=$HAUL_HOME_DIR
  bounded 30 "$HAUL" keygen -f "$HAUL_HOME/server.key" </dev/null >&2 || die "haul keygen (server) failed"
  bounded 30 "$HAUL" keygen -f "$HAUL_HOME/client.key" </dev/null >&2 || die "haul keygen (client) failed"
  [[ -s $HAUL_HOME/client.key.pub ]] || die "haul keygen did not write client.key.pub"
  cp "$HAUL_HOME/client.key.pub" "$HAUL_HOME/authorized_keys"
  HAUL_OK=1
}

start_haul_server() { # start_haul_server ROOT
  HAUL_PORT=$(free_port)
  HAUL_LOG=$TMP_DIR/haul-serve-$HAUL_PORT.log
  start_bg "$HAUL_LOG" "$HAUL_LOG" "$HAUL" serve --root "$1" --listen "127.0.0.1:$HAUL_PORT" \
    --key "$HAUL_HOME/server.key" --authorized-keys "$HAUL_HOME/authorized_keys"
  HAUL_PID=$BG_PID
  wait_listen "$HAUL_PORT" "$HAUL_PID" "haul serve" "$HAUL_LOG"
  log "haul serve (pid $HAUL_PID) on 127.0.0.1:$HAUL_PORT, root $1"
}

stop_haul_server() { [[ -n $HAUL_PID ]] && stop_pid "$HAUL_PID"; HAUL_PID=""; }

# haul_cp JSONOUT ARGS...: one timed-out `haul cp --json`, dying loudly on failure.
haul_cp() {
  local out=$1 err=$1.err rc=0
  shift
  bounded "$XFER_TIMEOUT" "$HAUL" cp --json --identity "$HAUL_HOME/client.key" \
    --known-hosts "$HAUL_HOME/known_hosts" "$@" </dev/null >"$out" 2>"$err" || rc=$?
  if ((rc != 0)); then
    log "haul cp $* failed (rc $rc)"
    tail -n 20 "$err" >&2
    [[ -n $HAUL_LOG ]] && { log "server log:"; tail -n 20 "$HAUL_LOG" >&2; }
    die "haul cp failed"
  fi
}

# haul_run GROUP MODE SRC DST VERIFY_FILE: REPS runs; goodput from JSON (mem)
# or bytes/wall time (file).
haul_run() {
  local group=$1 mode=$2 src=$3 dst=$4 verify=$5 flags=() rep t0 t1 c0 c1 json
  local goodput=() wall=() reported=() cpu=() bps bytes streams
  [[ $mode == no-encrypt ]] && flags+=(--no-encrypt)
  log "haul $group $mode, $STREAMS streams, $REPS rep(s)"
  for ((rep = 1; rep <= REPS; rep++)); do
    warm_cache
    [[ -n $verify ]] && rm -f -- "$verify"
    json=$TMP_DIR/haul-$group-$mode-$rep.json
    c0=$(cg_usage) t0=$(now)
    haul_cp "$json" --streams "$STREAMS" "${flags[@]}" "$src" "$dst"
    t1=$(now) c1=$(cg_usage)
    bps=$(json_get "$json" .goodput_bps)
    bytes=$(json_get "$json" .file_bytes)
    streams=$(json_get "$json" .streams)
    [[ -n $bps ]] || { cat "$json" >&2; die "haul --json output lacks goodput_bps"; }
    [[ $bytes == "$SIZE_BYTES" ]] || die "haul reported file_bytes=$bytes, expected $SIZE_BYTES"
    [[ $streams == "$STREAMS" ]] || log "  note: haul reports streams=$streams (asked $STREAMS)"
    [[ -n $verify ]] && verify_copy "$verify" "haul $group $mode"
    [[ -n $verify ]] && { rm -f -- "$verify"; sync; }
    wall+=("$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6")")
    reported+=("$(calc "$bps / 1e6")")
    cpu+=("$(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")")
    log "  rep $rep: reported $(fmt1 "${reported[-1]}") Mbit/s, wall $(fmt1 "${wall[-1]}") Mbit/s${cpu[-1]:+, $(fmt2 "${cpu[-1]}") CPU s/GB}"
  done
  if [[ $group == mem ]]; then goodput=("${reported[@]}"); else goodput=("${wall[@]}"); fi
  add_row "$group" haul "$mode" "$STREAMS" "$(median "${goodput[@]}")" \
    "$(median "${wall[@]}")" "$(median "${reported[@]}")" "$(median_of_set "${cpu[@]}")" "${goodput[@]}"
}

# ---- reference tools --------------------------------------------------------
# iperf3_run [FILE]: memory to memory, or with FILE the client reads what it
# sends from that file (-F), once through (-n its size).
iperf3_run() {
  local file=${1:-} rep port pid json err bps bytes c0 c1 samples=() cpu=() how=()
  if [[ -n $file ]]; then how=(-F "$file" -n "$SIZE_BYTES"); else how=(-t "$IPERF_TIME"); fi
  log "iperf3 -P $STREAMS ${how[*]}, $REPS rep(s)"
  for ((rep = 1; rep <= REPS; rep++)); do
    port=$(free_port)
    json=$TMP_DIR/iperf3-$rep.json
    err=$TMP_DIR/iperf3-server-$rep.log
    start_bg "$err" "$err" iperf3 -s -1 -B 127.0.0.1 -p "$port"
    pid=$BG_PID
    wait_listen "$port" "$pid" "iperf3 server" "$err"
    c0=$(cg_usage)
    [[ -n $file ]] && warm_cache
    bounded $((IPERF_TIME + XFER_TIMEOUT)) iperf3 -c 127.0.0.1 -p "$port" -P "$STREAMS" "${how[@]}" -J \
      </dev/null >"$json" || { cat "$json" >&2; die "iperf3 client failed"; }
    wait_exit "$pid" 10 || true
    c1=$(cg_usage)
    { read -r bps; read -r bytes; } < <(json_get "$json" .end.sum_received.bits_per_second .end.sum_received.bytes)
    [[ -n $bps ]] || { cat "$json" >&2; die "no sum_received in iperf3 output"; }
    samples+=("$(calc "$bps / 1e6")")
    cpu+=("$(cpu_per_gb "$c0" "$c1" "${bytes%.*}")")
    log "  rep $rep: $(fmt1 "${samples[-1]}") Mbit/s${cpu[-1]:+, $(fmt2 "${cpu[-1]}") CPU s/GB}"
  done
  add_row mem iperf3 "tcp${file:+-F}" "$STREAMS" "$(median "${samples[@]}")" "" "$(median "${samples[@]}")" \
    "$(median_of_set "${cpu[@]}")" "${samples[@]}"
}

# nc_run [fsync]: nc file to file; with "fsync" the copy's fsync (sync FILE)
# is timed too, as haul makes what it received durable before it is done.
nc_run() {
  local durable=${1:-} rep port pid out=$TMP_DIR/nc/out.bin err=$TMP_DIR/nc/listen.log t0 t1 c0 c1 rc samples=() cpu=()
  mkdir -p "$TMP_DIR/nc"
  log "nc file->file${durable:+ + fsync}, $REPS rep(s)"
  for ((rep = 1; rep <= REPS; rep++)); do
    warm_cache
    rm -f -- "$out"
    port=$(free_port)
    start_bg "$out" "$err" "$NC" -l 127.0.0.1 "$port"
    pid=$BG_PID
    wait_listen "$port" "$pid" "nc listener" "$err"
    c0=$(cg_usage) t0=$(now)
    bounded "$XFER_TIMEOUT" "$NC" -N 127.0.0.1 "$port" <"$DATA" >/dev/null || die "nc sender failed"
    rc=0
    wait_exit "$pid" 30 || rc=$?
    [[ -n $durable ]] && sync -- "$out"
    t1=$(now) c1=$(cg_usage)
    ((rc == 0)) || { cat "$err" >&2; die "nc listener exited with $rc"; }
    verify_copy "$out" nc
    rm -f -- "$out"; sync
    samples+=("$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6")")
    cpu+=("$(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")")
    log "  rep $rep: $(fmt1 "${samples[-1]}") Mbit/s${cpu[-1]:+, $(fmt2 "${cpu[-1]}") CPU s/GB}"
  done
  add_row file nc "tcp${durable:++fsync}" 1 "$(median "${samples[@]}")" "$(median "${samples[@]}")" "" \
    "$(median_of_set "${cpu[@]}")" "${samples[@]}"
}

SSHD_PORT=""
SSHD_PID=""
SSH_OPTS=()

start_sshd() {
  local d=$TMP_DIR/sshd cfg
  mkdir -p "$d"
  chmod 700 "$d"
  cfg=$d/sshd_config
  ssh-keygen -q -t ed25519 -N '' -C haul-bench-host -f "$d/host_key" </dev/null
  ssh-keygen -q -t ed25519 -N '' -C haul-bench-user -f "$d/user_key" </dev/null
  cp "$d/user_key.pub" "$d/authorized_keys"
  chmod 600 "$d/authorized_keys"
  [[ -d /run/sshd ]] || mkdir -p /run/sshd 2>/dev/null || log "WARNING: cannot create /run/sshd"
  SSHD_PORT=$(free_port)
  cat >"$cfg" <<EOF
Port $SSHD_PORT
ListenAddress 127.0.0.1
HostKey $d/host_key
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
X11Forwarding no
PrintMotd no
Subsystem sftp internal-sftp
EOF
  /usr/sbin/sshd -t -f "$cfg" || die "sshd config test failed"
  start_bg "$d/sshd.log" "$d/sshd.log" /usr/sbin/sshd -f "$cfg" -D -e
  SSHD_PID=$BG_PID
  wait_listen "$SSHD_PORT" "$SSHD_PID" sshd "$d/sshd.log"
  SSH_OPTS=(-F /dev/null -i "$d/user_key" -o IdentitiesOnly=yes -o BatchMode=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR)
  bounded 20 ssh "${SSH_OPTS[@]}" -p "$SSHD_PORT" "$(id -un)@127.0.0.1" true </dev/null \
    || { tail -n 20 "$d/sshd.log" >&2; die "ssh login to throwaway sshd failed"; }
  log "sshd (pid $SSHD_PID) on 127.0.0.1:$SSHD_PORT"
}

stop_sshd() { [[ -n $SSHD_PID ]] && stop_pid "$SSHD_PID"; SSHD_PID=""; }

# tls_run: socat over TLS 1.3 (OpenSSL's default suite, AES-256-GCM), file to
# file: the AES-GCM reference for haul's encrypted push. A self-signed
# certificate made here; verification is off as both ends are this host.
tls_run() {
  local rep port pid out=$TMP_DIR/tls/out.bin err=$TMP_DIR/tls/listen.log pem=$TMP_DIR/tls/cert.pem
  local t0 t1 c0 c1 rc samples=() cpu=()
  mkdir -p "$TMP_DIR/tls"
  bounded 30 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj /CN=localhost -keyout "$TMP_DIR/tls/key.pem" -out "$TMP_DIR/tls/crt.pem" 2>/dev/null \
    || die "openssl could not make a certificate"
  cat "$TMP_DIR/tls/key.pem" "$TMP_DIR/tls/crt.pem" >"$pem"
  log "socat TLS 1.3 file->file, $REPS rep(s)"
  for ((rep = 1; rep <= REPS; rep++)); do
    warm_cache
    rm -f -- "$out"
    port=$(free_port)
    start_bg "$err" "$err" socat -b 262144 -u \
      "OPENSSL-LISTEN:$port,bind=127.0.0.1,cert=$pem,verify=0" "OPEN:$out,creat,trunc"
    pid=$BG_PID
    wait_listen "$port" "$pid" "socat TLS listener" "$err"
    c0=$(cg_usage) t0=$(now)
    bounded "$XFER_TIMEOUT" socat -b 262144 -u "OPEN:$DATA" "OPENSSL:127.0.0.1:$port,verify=0" \
      || die "socat TLS sender failed"
    rc=0
    wait_exit "$pid" 30 || rc=$?
    t1=$(now) c1=$(cg_usage)
    ((rc == 0)) || { cat "$err" >&2; die "socat TLS listener exited with $rc"; }
    verify_copy "$out" "socat TLS"
    rm -f -- "$out"; sync
    samples+=("$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6")")
    cpu+=("$(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")")
    log "  rep $rep: $(fmt1 "${samples[-1]}") Mbit/s${cpu[-1]:+, $(fmt2 "${cpu[-1]}") CPU s/GB}"
  done
  add_row file socat tls-aes256gcm 1 "$(median "${samples[@]}")" "$(median "${samples[@]}")" "" \
    "$(median_of_set "${cpu[@]}")" "${samples[@]}"
}

scp_run() {
  local rep out=$TMP_DIR/scp/out.bin t0 t1 c0 c1 samples=() cpu=()
  mkdir -p "$TMP_DIR/scp"
  start_sshd
  log "scp file->file (default cipher), $REPS rep(s)"
  for ((rep = 1; rep <= REPS; rep++)); do
    warm_cache
    rm -f -- "$out"
    c0=$(cg_usage) t0=$(now)
    bounded "$XFER_TIMEOUT" scp -q -B "${SSH_OPTS[@]}" -P "$SSHD_PORT" "$DATA" \
      "$(id -un)@127.0.0.1:$out" </dev/null || die "scp failed"
    t1=$(now) c1=$(cg_usage)
    verify_copy "$out" scp
    rm -f -- "$out"; sync
    samples+=("$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6")")
    cpu+=("$(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")")
    log "  rep $rep: $(fmt1 "${samples[-1]}") Mbit/s${cpu[-1]:+, $(fmt2 "${cpu[-1]}") CPU s/GB}"
  done
  stop_sshd
  add_row file scp ssh 1 "$(median "${samples[@]}")" "$(median "${samples[@]}")" "" \
    "$(median_of_set "${cpu[@]}")" "${samples[@]}"
}

# ---- phases -----------------------------------------------------------------
bench_mem() {
  iperf3_run
  iperf3_run "$DATA"
  if ((HAUL_OK)); then
    start_haul_server "$SHM_DIR/data"
    haul_run mem encrypted "127.0.0.1:$HAUL_PORT:data.bin" /dev/null ""
    haul_run mem no-encrypt "127.0.0.1:$HAUL_PORT:data.bin" /dev/null ""
    stop_haul_server
  fi
}

bench_file() {
  local root=$TMP_DIR/haul-root
  nc_run
  nc_run fsync
  tls_run
  scp_run
  if ((HAUL_OK)); then
    mkdir -p "$root"
    start_haul_server "$root"
    haul_run file encrypted "$DATA" "127.0.0.1:$HAUL_PORT:push.bin" "$root/push.bin"
    haul_run file no-encrypt "$DATA" "127.0.0.1:$HAUL_PORT:push.bin" "$root/push.bin"
    stop_haul_server
  fi
}

# tree_push KIND ROOT REP: one timed push of the tree (KIND tree) or of the
# one file (KIND file) into a directory of its own under ROOT, verified;
# echoes "goodput_mbit_s cpu_s_per_gb". Copies of the tree are kept until
# the part ends (one file's are removed at once, freeing one inode):
# ext4 skips inodes freed in the last minute when it allocates
# (recently_deleted, reading each candidate's inode table block), and a
# tree created right after 20,000 files were deleted spends up to half its
# time there, in every tool; a tree written just after another was
# deleted is not the case measured here.
tree_push() {
  local kind=$1 root=$2 rep=$3 json t0 t1 c0 c1
  json=$TMP_DIR/haul-tree-$kind.json
  sync
  if [[ $kind == tree ]]; then
    find "$TREE" -type f -exec cat {} + >/dev/null
    c0=$(cg_usage) t0=$(now)
    haul_cp "$json" -r "$TREE/" "127.0.0.1:$HAUL_PORT:tree-$rep"
    t1=$(now) c1=$(cg_usage)
    diff -r -q -- "$TREE" "$root/tree-$rep" >&2 || die "haul tree: the copy differs from the source"
  else
    warm_cache
    c0=$(cg_usage) t0=$(now)
    haul_cp "$json" "$DATA" "127.0.0.1:$HAUL_PORT:one-$rep.bin"
    t1=$(now) c1=$(cg_usage)
    verify_copy "$root/one-$rep.bin" "haul one file"
    rm -f -- "$root/one-$rep.bin"
  fi
  [[ $(json_get "$json" .file_bytes) == "$SIZE_BYTES" ]] || die "haul $kind: file_bytes is not $SIZE_BYTES"
  echo "$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6") $(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")"
}

# tar_nc_push REP: the tree through tar | nc into $TMP_DIR/tarnc-REP, synced before
# the time is taken (haul's copy is durable when it returns, too).
tar_nc_push() {
  local out=$TMP_DIR/tarnc-$1 port pid err=$TMP_DIR/tarnc.log t0 t1 c0 c1 rc=0
  mkdir -p "$out"; sync
  find "$TREE" -type f -exec cat {} + >/dev/null
  port=$(free_port)
  start_bg /dev/null "$err" sh -c '"$1" -l 127.0.0.1 "$2" | tar -x -C "$3" -f -' sh "$NC" "$port" "$out"
  pid=$BG_PID
  wait_listen "$port" "$pid" "nc | tar listener" "$err"
  c0=$(cg_usage) t0=$(now)
  tar -c -C "$TREE" -f - . | bounded "$XFER_TIMEOUT" "$NC" -N 127.0.0.1 "$port" >/dev/null || die "tar | nc failed"
  wait_exit "$pid" 60 || rc=$?
  sync -f "$out"
  t1=$(now) c1=$(cg_usage)
  ((rc == 0)) || { cat "$err" >&2; die "nc | tar exited with $rc"; }
  diff -r -q -- "$TREE" "$out" >&2 || die "tar | nc: the copy differs from the source"
  echo "$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6") $(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")"
}

# cp_push KIND REP: coreutils cp of the tree (KIND tree) or of the one file
# into $TMP_DIR/cp-KIND-REP, synced: no network, no hashing, no
# encryption; what this file system allows a tree against one file.
cp_push() {
  local kind=$1 out=$TMP_DIR/cp-$1-$2 t0 t1 c0 c1
  sync
  if [[ $kind == tree ]]; then
    find "$TREE" -type f -exec cat {} + >/dev/null
    c0=$(cg_usage) t0=$(now)
    cp -r -- "$TREE" "$out" || die "cp -r failed"
  else
    warm_cache
    c0=$(cg_usage) t0=$(now)
    cp -- "$DATA" "$out" || die "cp failed"
  fi
  sync -f "$TMP_DIR"
  t1=$(now) c1=$(cg_usage)
  [[ $kind == tree ]] || rm -f -- "$out"
  echo "$(calc "$SIZE_BYTES * 8 / ($t1 - $t0) / 1e6") $(cpu_per_gb "$c0" "$c1" "$SIZE_BYTES")"
}

# bench_tree: REPS rounds; in each the one file, the tree and tar | nc take
# turns, each round starting one further on, so no row always runs first.
bench_tree() {
  local root=$TMP_DIR/haul-root rep k i g c n
  local order=(file tree tarnc cpfile cptree) rows=(file tree tarnc cpfile cptree)
  local -A got=() cpu=()
  ((HAUL_OK)) || die "the tree part needs haul"
  mkdir -p "$root"
  start_haul_server "$root"
  n=${#order[@]}
  for ((rep = 1; rep <= REPS; rep++)); do
    for ((k = 0; k < n; k++)); do
      i=${order[(rep + k) % n]}
      case $i in
        file) read -r g c < <(tree_push file "$root" "$rep") ;;
        tree) read -r g c < <(tree_push tree "$root" "$rep") ;;
        tarnc) read -r g c < <(tar_nc_push "$rep") ;;
        cpfile) read -r g c < <(cp_push file "$rep") ;;
        cptree) read -r g c < <(cp_push tree "$rep") ;;
      esac
      got[$i]+="$g " cpu[$i]+="$c "
      log "  rep $rep $i: $(fmt1 "$g") Mbit/s${c:+, $(fmt2 "$c") CPU s/GB}"
    done
  done
  stop_haul_server
  rm -rf -- "$root" "$TMP_DIR"/tarnc-* "$TMP_DIR"/cp-*
  for i in "${rows[@]}"; do
    local tool=haul mode="tree-$TREE_FILES" gs cs
    case $i in
      file) mode=one-file ;;
      tarnc) tool=tar+nc ;;
      cpfile) tool=cp mode=one-file ;;
      cptree) tool=cp ;;
    esac
    read -r -a gs <<<"${got[$i]}"
    read -r -a cs <<<"${cpu[$i]}"
    add_row tree "$tool" "$mode" 1 "$(median "${gs[@]}")" "$(median "${gs[@]}")" "" \
      "$(median_of_set "${cs[@]}")" "${gs[@]}"
  done
}

# ---- report -----------------------------------------------------------------
# baseline_of GROUP TOOL MODE -> "tool mode" of the row it is compared with:
# iperf3 in memory; in files an encrypted haul against the AES-GCM tool
# (socat TLS), everything else against plain nc.
baseline_of() {
  if [[ $1 == mem ]]; then echo "iperf3 tcp"
  elif [[ $1 == tree && $2 == cp ]]; then echo "cp one-file"
  elif [[ $1 == tree ]]; then echo "haul one-file"
  elif [[ $2 == haul && $3 == encrypted ]]; then echo "socat tls-aes256gcm"
  else echo "nc tcp"; fi
}

goal_of() { # goal_of GROUP TOOL MODE -> minimum ratio or empty
  [[ $2 == haul ]] || return 0
  case $1/$3 in
    tree/one-file) ;;
    tree/*) echo 0.9 ;;           # issue 43: a tree >= 0.9 of one file
    mem/encrypted) echo 0.70 ;;
    mem/*) echo 0.85 ;;
    file/encrypted) echo 1.2 ;;   # issue 26: 1.2 x the AES-GCM tool
    file/*) echo 1.0 ;;           # issue 26: at least the clear-text tool
  esac
}

# ratio_of INDEX -> "ratio|base_tool" (empty ratio when the baseline is absent)
ratio_of() {
  local i=$1 j base bmode
  read -r base bmode <<<"$(baseline_of "${R_GROUP[i]}" "${R_TOOL[i]}" "${R_MODE[i]}")"
  for j in "${!R_TOOL[@]}"; do
    if [[ ${R_GROUP[j]} == "${R_GROUP[i]}" && ${R_TOOL[j]} == "$base" && ${R_MODE[j]} == "$bmode" ]]; then
      echo "$(calc "${R_GOODPUT[i]} / ${R_GOODPUT[j]}")|$base"
      return 0
    fi
  done
  echo "|$base"
}

report() {
  local stamp=$1 csv i ratio vs goal status kernel cpu ncpu haulver
  kernel=$(uname -r)
  ncpu=$(nproc)
  cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  haulver=n/a
  ((HAUL_OK)) && haulver=$(bounded 5 "$HAUL" --version 2>/dev/null | head -n 1 || true)
  mkdir -p "$SCRIPT_DIR/out"
  csv=$SCRIPT_DIR/out/loopback-$stamp.csv
  {
    echo "# haul loopback benchmark $stamp"
    echo "# kernel: $kernel"
    echo "# nproc: $ncpu"
    echo "# cpu: $cpu"
    echo "# size_bytes: $SIZE_BYTES reps: $REPS streams: $STREAMS iperf3_t: $IPERF_TIME"
    echo "# haul: $HAUL (${haulver:-unknown})"
    echo "group,tool,mode,streams,goodput_mbit_s,ratio,ratio_vs,goal,status,wall_mbit_s,reported_mbit_s,cpu_s_per_gb,samples_mbit_s"
  } >"$csv"

  printf '\nhaul loopback benchmark  %s\n' "$stamp"
  printf 'kernel %s | nproc %s | cpu %s\n' "$kernel" "$ncpu" "$cpu"
  printf 'size %s bytes | reps %s (median) | streams %s | haul %s\n\n' \
    "$SIZE_BYTES" "$REPS" "$STREAMS" "${haulver:-unknown}"
  printf '%-7s %-16s %7s %14s %8s %7s  %-8s %s\n' tool mode streams "goodput Mbit/s" "CPU s/GB" ratio vs goal
  printf '%-7s %-16s %7s %14s %8s %7s  %-8s %s\n' ------- ---------------- ------- -------------- -------- ------- -------- ----
  for i in "${!R_TOOL[@]}"; do
    IFS='|' read -r ratio vs <<<"$(ratio_of "$i")"
    goal=$(goal_of "${R_GROUP[i]}" "${R_TOOL[i]}" "${R_MODE[i]}")
    status=""
    if [[ -n $goal && -n $ratio ]]; then
      status=$(awk -v r="$ratio" -v g="$goal" 'BEGIN { print (r >= g) ? "PASS" : "FAIL" }')
    fi
    printf '%-7s %-16s %7s %14s %8s %7s  %-8s %s\n' "${R_TOOL[i]}" "${R_GROUP[i]}/${R_MODE[i]}" \
      "${R_STREAMS[i]}" "$(fmt1 "${R_GOODPUT[i]}")" "${R_CPU[i]:+$(fmt2 "${R_CPU[i]}")}" \
      "${ratio:+$(printf '%.3f' "$ratio")}" "${ratio:+$vs}" "${goal:+>=$goal $status}"
    printf '%s,%s,%s,%s,%.1f,%s,%s,%s,%s,%s,%s,%s,%s\n' "${R_GROUP[i]}" "${R_TOOL[i]}" "${R_MODE[i]}" \
      "${R_STREAMS[i]}" "${R_GOODPUT[i]}" "${ratio:+$(printf '%.3f' "$ratio")}" "$vs" "$goal" "$status" \
      "${R_WALL[i]:+$(fmt1 "${R_WALL[i]}")}" "${R_REPORTED[i]:+$(fmt1 "${R_REPORTED[i]}")}" \
      "${R_CPU[i]:+$(fmt2 "${R_CPU[i]}")}" "${R_SAMPLES[i]}" >>"$csv"
  done
  ((HAUL_OK)) || printf '\n(haul rows skipped: %s not found)\n' "$HAUL"
  printf '\nmem ratios: haul goodput_bps / iperf3 sum_received; file ratios: wall goodput / nc,\n'
  printf 'encrypted haul / socat TLS. haul and nc tcp+fsync include the fsync of the copy.\n'
  if [[ -n $CG_MODE ]]; then
    printf 'CPU s/GB: user+sys of both ends per 10^9 bytes moved, median of the reps (cgroup %s).\n' "$CG_MODE"
  else
    printf 'CPU s/GB: not accounted (no writable cgroup).\n'
  fi
  printf 'CSV: %s\n' "$csv"
}

main() {
  local stamp
  stamp=$(date +%Y%m%d-%H%M%S)
  parse_args "$@"
  ensure_packages
  make_dirs_and_data
  cg_setup
  setup_haul
  [[ $ONLY == all || $ONLY == mem ]] && bench_mem
  [[ $ONLY == all || $ONLY == file ]] && bench_file
  [[ $ONLY == tree ]] && bench_tree
  report "$stamp"
}

main "$@"
