#!/usr/bin/env bash
# bench/wan.sh: haul vs other bulk movers over an emulated WAN (haul-netem).
#
# For each profile one `haul-netem` instance joins two namespaces NAME-a
# (198.18.0.1, sender) and NAME-b (198.18.0.2, receiver); every tool pushes
# each dataset from a to b, the copy is verified and deleted. See bench/README.md
# and docs/BENCHMARKS.md. Run `bench/wan.sh --help` for options.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
NETEM=${NETEM:-$REPO/target/release/haul-netem}
SERVER_TTL=${SERVER_TTL:-14400}   # hard upper bound on any background process
PACKAGES=(iperf3 netcat-openbsd openssh-server openssh-client rsync pigz zstd uftp tar time)
export JSON_TOOL=python3   # read by json_get in lib.sh

ADDR_A=198.18.0.1
ADDR_B=198.18.0.2
HAUL_PORT=7050
NC_PORT=5001
IPERF_PORT=5201
UFTP_PORT=1044
UFTP_UID_A=0xC6120001
UFTP_UID_B=0xC6120002

# name|rate|one-way delay ms|loss %
ALL_PROFILES=(
  "lan|1000M|0.1|0"
  "wan|1000M|75|0"
  "wan-loss0.1|1000M|75|0.1"
  "wan-loss1|1000M|75|1"
  "wan-loss10|1000M|75|10"
  "long-loss1|1000M|300|1"
  "slow|100M|15|0"
  "fast|4000M|75|0"
)
ALL_DATASETS=(random zeros text tree usr)
ALL_TOOLS=(haul haul-fresh haul-tcp haul-tcp-pull haul-noenc haul-nocomp haul-lz4 haul-zstd haul-ssh haul-ssh-relay scp rsync nc nc-zstd nc-pigz uftp iperf3-cubic iperf3-bbr)
QUICK_PROFILES=lan,wan,wan-loss1
QUICK_TOOLS=haul,haul-noenc,haul-ssh,rsync,nc,nc-zstd,iperf3-cubic,iperf3-bbr

# ---- options ----------------------------------------------------------------
QUICK=0
REPS=""
PROFILES_ARG=""
DATASETS_ARG=""
TOOLS_ARG=""
VARIANT_ARG=""
SIZE_ARG=""
TREE_FILES=""
CAP=""
BUDGET=""
MTU=1500
IPERF_TIME=""
EMULATOR=haul-netem

usage() {
  cat <<EOF
Usage: $0 [options]        (run as root)

Pushes datasets from namespace NAME-a to NAME-b across haul-netem with each tool,
verifies every copy, and reports goodput, ratios and CPU per GB.

Options:
  --quick            128 MiB datasets, tree of 2,000 files, profiles $QUICK_PROFILES,
                     1 rep, tools $QUICK_TOOLS,
                     untuned only, 40 s cap per run, 540 s budget (explicit options still win)
  --reps N           repetitions per (profile, dataset, tool); median reported (default 2)
  --profiles LIST    comma list of: $(printf '%s ' "${ALL_PROFILES[@]%%|*}")(default all but fast)
  --datasets LIST    comma list of: ${ALL_DATASETS[*]} (default all)
  --tools LIST       comma list of: ${ALL_TOOLS[*]}, uftp-tfmcc, haul-tcp-sN
                     (--transport tcp --streams N) (default all but the last two)
  --variant V        untuned | tuned | both (default both; quick: untuned)
  --size SIZE        size of random/zeros/text: 1G, 128M, 1GiB or bytes (default 1G)
  --tree-files N     files in the tree dataset (default 10000; quick 2000)
  --cap SECS         minimum wall-clock cap per run (default 120; quick 40); the cap is
                     raised to 2x the ideal time at link rate + 20 s where that is larger
  --budget SECS      stop starting runs after SECS in total, marking the rest skipped
                     (default none; quick 540)
  --iperf-time SECS  iperf3 -t (default 10; quick 5)
  --mtu N            MTU of the emulated link (default 1500; 9000 as on DTNs). At 1 Gbit/s
                     and MTU 1500 the emulator needs about a core of this 2-core machine
  --emulator E       haul-netem (default) or tc: a kernel veth + tc-netem stand-in for
                     developing this script; its numbers are not comparable
  -h, --help         this help

Environment: HAUL, NETEM (binaries; default target/release/haul and haul-netem);
NETEM_SEED (the emulator's seed for loss and other random choices, default 1).
Output: table on stdout, progress on stderr, bench/out/wan-STAMP.csv, -runs.csv, .png.
EOF
}

# ---- state ------------------------------------------------------------------
SHM_DIR="" TMP_DIR="" DATA_DIR="" RECV="" RUNS_CSV="" META=""
PIDS=()              # background processes this script started (and only those)
BG_PID=""
NS_NAMES=()          # namespaces this script created or had haul-netem create
EMU_PID="" EMU_NAME="" NS_A="" NS_B=""
HAUL_PID="" SSHD_PID=""
CG_MODE="" CG_ROOT=""
HOST_SYSCTL_SAVED=0 HOST_RMEM_ORIG="" HOST_WMEM_ORIG="" HOST_TUNE_RESULT="not tried"
T_START=0
SIZE_BYTES=0
declare -A DS_PATH DS_BYTES DS_KIND
PROFILES=() DATASETS=() TOOLS=() VARIANTS=()
SSH_OPTS=() SSH_E=""
NC=nc
UFTP_OK=1
EMU_FAILED=0 NS_CC="?" VARIANT="" STAMP=""

# ---- process helpers --------------------------------------------------------

# stop_pid PID [SECS]: TERM, wait up to SECS (3) s, then KILL. Only for PIDs we
# started (each is a `timeout` that relays the signal to its own process group).

# cgroup CPU accounting: three groups (cli, srv, emu) under our own
# haul-wan-$$ directory; every process we start is placed in one of them and
# its descendants follow, so user+sys of both ends is read from the groups.
cg_setup() {
  local base
  read -r CG_MODE base <<<"$(cg_base)"
  if [[ -z $CG_MODE ]]; then
    log "WARNING: no writable cgroup (cpuacct v1 or v2); CPU columns will be empty"
    return 0
  fi
  CG_ROOT=$base/haul-wan-$$
  if ! mkdir "$CG_ROOT" "$CG_ROOT/cli" "$CG_ROOT/srv" "$CG_ROOT/emu" 2>/dev/null; then
    log "WARNING: cannot create cgroups under $base; CPU columns will be empty"
    rmdir "$CG_ROOT"/{cli,srv,emu} "$CG_ROOT" 2>/dev/null || true
    CG_MODE="" CG_ROOT=""
    return 0
  fi
  log "CPU accounting: cgroup $CG_MODE at $CG_ROOT"
}

# cg_exec GROUP CMD... &: only ever called in the background (`&`), where bash
# forks a subshell for the function: that subshell joins cgroup GROUP and execs
# CMD, so $! is CMD's own PID.
cg_exec() {
  local g=$1
  shift
  [[ -z $CG_MODE ]] || echo "$BASHPID" >"$CG_ROOT/$g/cgroup.procs" || true
  exec "$@"
}

# cg_usage GROUP: cumulative CPU seconds (user+sys) of the group
cg_usage() {
  [[ -n $CG_MODE ]] || { echo ""; return 0; }
  cg_read "$CG_MODE" "$CG_ROOT/$1"
}

cg_cleanup() {
  [[ -n $CG_ROOT && -d $CG_ROOT ]] || return 0
  local g i
  for g in cli srv emu; do
    for ((i = 0; i < 30; i++)); do
      rmdir "$CG_ROOT/$g" 2>/dev/null && break
      [[ -d $CG_ROOT/$g ]] || break
      sleep 0.1
    done
  done
  rmdir "$CG_ROOT" 2>/dev/null || log "WARNING: could not remove $CG_ROOT (processes left in it?)"
}

# start_bg GROUP LOG TTL CMD...: background CMD under `timeout TTL` (own process
# group, so a timeout or stop_pid reaches the whole pipeline) inside cgroup GROUP.
start_bg() {
  local g=$1 logf=$2 ttl=$3
  shift 3
  cg_exec "$g" timeout --kill-after=5 "$ttl" "$@" </dev/null >"$logf" 2>&1 &
  BG_PID=$!
  PIDS+=("$BG_PID")
}

# wait_pid PID: wait for a PID we started; returns its status

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

# wait_listen_b PROTO PORT PID WHAT LOG: <= 10 s for a listener inside NAME-b
wait_listen_b() {
  local proto=$1 port=$2 pid=$3 what=$4 logf=$5 i flag=-Hltn
  [[ $proto == udp ]] && flag=-Hlun
  for ((i = 0; i < 100; i++)); do
    [[ -n $(ip netns exec "$NS_B" ss "$flag" "sport = :$port" 2>/dev/null) ]] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$logf" >&2 || true
      log "$what exited before listening on $ADDR_B:$port"
      return 1
    fi
    sleep 0.1
  done
  tail -n 20 "$logf" >&2 || true
  log "$what not listening on $ADDR_B:$port after 10 s"
  return 1
}

# ---- setup ------------------------------------------------------------------
# split_list VAR LIST ALLOWED...: sets array VAR to LIST's comma-separated
# items; dies on an item not in ALLOWED
split_list() {
  local -n _out=$1
  local list=$2 item ok a items=()
  shift 2
  _out=()
  IFS=',' read -r -a items <<<"$list"
  for item in "${items[@]}"; do
    [[ -n $item ]] || continue
    ok=0
    # shellcheck disable=SC2053 # an allowed item may be a pattern
    for a in "$@"; do [[ $item == $a ]] && ok=1; done
    ((ok)) || die "unknown item '$item' (allowed: $*)"
    _out+=("$item")
  done
}

parse_args() {
  while (($#)); do
    case $1 in
      --quick) QUICK=1 ;;
      --reps) REPS=${2:?--reps needs a value}; shift ;;
      --reps=*) REPS=${1#*=} ;;
      --profiles) PROFILES_ARG=${2:?--profiles needs a value}; shift ;;
      --profiles=*) PROFILES_ARG=${1#*=} ;;
      --datasets) DATASETS_ARG=${2:?--datasets needs a value}; shift ;;
      --datasets=*) DATASETS_ARG=${1#*=} ;;
      --tools) TOOLS_ARG=${2:?--tools needs a value}; shift ;;
      --tools=*) TOOLS_ARG=${1#*=} ;;
      --variant) VARIANT_ARG=${2:?--variant needs a value}; shift ;;
      --variant=*) VARIANT_ARG=${1#*=} ;;
      --size) SIZE_ARG=${2:?--size needs a value}; shift ;;
      --size=*) SIZE_ARG=${1#*=} ;;
      --tree-files) TREE_FILES=${2:?--tree-files needs a value}; shift ;;
      --tree-files=*) TREE_FILES=${1#*=} ;;
      --mtu) MTU=${2:?--mtu needs a value}; shift ;;
      --mtu=*) MTU=${1#*=} ;;
      --cap) CAP=${2:?--cap needs a value}; shift ;;
      --cap=*) CAP=${1#*=} ;;
      --budget) BUDGET=${2:?--budget needs a value}; shift ;;
      --budget=*) BUDGET=${1#*=} ;;
      --iperf-time) IPERF_TIME=${2:?--iperf-time needs a value}; shift ;;
      --iperf-time=*) IPERF_TIME=${1#*=} ;;
      --emulator) EMULATOR=${2:?--emulator needs a value}; shift ;;
      --emulator=*) EMULATOR=${1#*=} ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown option: $1" ;;
    esac
    shift
  done
  if ((QUICK)); then
    : "${SIZE_ARG:=128M}" "${REPS:=1}" "${TREE_FILES:=2000}" "${PROFILES_ARG:=$QUICK_PROFILES}"
    : "${TOOLS_ARG:=$QUICK_TOOLS}" "${VARIANT_ARG:=untuned}" "${CAP:=40}" "${BUDGET:=540}" "${IPERF_TIME:=5}"
  fi
  : "${SIZE_ARG:=1G}" "${REPS:=2}" "${TREE_FILES:=10000}" "${VARIANT_ARG:=both}" "${CAP:=120}"
  : "${BUDGET:=0}" "${IPERF_TIME:=10}"
  local all_profile_names=("${ALL_PROFILES[@]%%|*}") default_profiles=() p
  # `fast` (4 Gbit/s) is asked for by name, with --mtu 9000: at 1500 bytes
  # the emulator, not the tools, would set its pace.
  for p in "${all_profile_names[@]}"; do [[ $p == fast ]] || default_profiles+=("$p"); done
  : "${PROFILES_ARG:=$(IFS=,; echo "${default_profiles[*]}")}"
  : "${DATASETS_ARG:=$(IFS=,; echo "${ALL_DATASETS[*]}")}"
  : "${TOOLS_ARG:=$(IFS=,; echo "${ALL_TOOLS[*]}")}"
  split_list PROFILES "$PROFILES_ARG" "${all_profile_names[@]}"
  split_list DATASETS "$DATASETS_ARG" "${ALL_DATASETS[@]}"
  split_list TOOLS "$TOOLS_ARG" "${ALL_TOOLS[@]}" uftp-tfmcc 'haul-tcp-s[0-9]*'
  ((${#PROFILES[@]})) || die "no profiles selected"
  ((${#TOOLS[@]})) || die "no tools selected"
  case $VARIANT_ARG in
    untuned | tuned) VARIANTS=("$VARIANT_ARG") ;;
    both) VARIANTS=(untuned tuned) ;;
    *) die "--variant must be untuned, tuned or both" ;;
  esac
  [[ $EMULATOR == haul-netem || $EMULATOR == tc ]] || die "--emulator must be haul-netem or tc"
  in_range "$REPS" 1 100 || die "--reps must be an integer 1..100"
  in_range "$TREE_FILES" 1 1000000 || die "--tree-files must be an integer 1..1000000"
  in_range "$CAP" 5 86400 || die "--cap must be an integer 5..86400 (seconds)"
  in_range "$BUDGET" 0 604800 || die "--budget must be an integer number of seconds"
  in_range "$IPERF_TIME" 1 600 || die "--iperf-time must be an integer 1..600"
  REPS=$((10#$REPS)) TREE_FILES=$((10#$TREE_FILES)) CAP=$((10#$CAP)) BUDGET=$((10#$BUDGET))
  IPERF_TIME=$((10#$IPERF_TIME))
  SIZE_BYTES=$(to_bytes "$SIZE_ARG")
  in_range "$SIZE_BYTES" 1 $((1 << 40)) || die "bad --size: $SIZE_ARG"
}

ensure_packages() {
  local p missing=()
  for p in "${PACKAGES[@]}"; do pkg_installed "$p" || missing+=("$p"); done
  if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get update -qq || log "WARNING: apt-get update failed"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}" >&2 \
      || log "WARNING: apt-get install failed; tools that need ${missing[*]} will fail"
  fi
  for p in ip ss ssh scp ssh-keygen rsync iperf3 cmp sha256sum tar timeout numfmt awk python3; do
    command -v "$p" >/dev/null || die "required command not found: $p"
  done
  [[ -x /usr/sbin/sshd ]] || die "/usr/sbin/sshd not found"
  [[ -x /bin/nc.openbsd ]] && NC=/bin/nc.openbsd
  "$NC" -h 2>&1 | grep -q OpenBSD || die "$NC is not OpenBSD netcat (need netcat-openbsd)"
  command -v uftp >/dev/null && command -v uftpd >/dev/null || UFTP_OK=0
  if ! python3 -c 'import matplotlib' 2>/dev/null; then
    log "installing matplotlib for the chart"
    timeout 600 python3 -m pip install -q matplotlib >&2 2>/dev/null \
      || log "WARNING: matplotlib not installed; no PNG will be written"
  fi
}

# ---- cleanup ----------------------------------------------------------------
restore_host_sysctl() {
  ((HOST_SYSCTL_SAVED)) || return 0
  sysctl -q -w net.core.rmem_max="$HOST_RMEM_ORIG" net.core.wmem_max="$HOST_WMEM_ORIG" >/dev/null 2>&1 \
    || log "WARNING: could not restore net.core.rmem_max/wmem_max to $HOST_RMEM_ORIG/$HOST_WMEM_ORIG"
  HOST_SYSCTL_SAVED=0
}


cleanup() {
  local rc=$? pid
  set +e
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do [[ $pid == "$EMU_PID" ]] || stop_pid "$pid"; done
  [[ -z $EMU_PID ]] || stop_pid "$EMU_PID" 15
  for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
  delete_our_namespaces
  restore_host_sysctl
  cg_cleanup
  [[ -n $SHM_DIR && -d $SHM_DIR ]] && rm -rf -- "$SHM_DIR"
  [[ -n $TMP_DIR && -d $TMP_DIR ]] && rm -rf -- "$TMP_DIR"
  exit "$rc"
}

# ---- datasets ---------------------------------------------------------------
make_datasets() {
  local d need=0 tree_est=$((TREE_FILES * 33 * 1024))
  for d in "${DATASETS[@]}"; do
    case $d in
      tree) need=$((need + 2 * tree_est)) ;;
      usr) need=$((need + 2 * $(du -sB1 /usr/share | cut -f1))) ;;
      *) need=$((need + 2 * SIZE_BYTES)) ;;
    esac
  done
  (($(avail_bytes /dev/shm) > need + 256 * 1024 * 1024)) \
    || die "not enough space in /dev/shm for datasets plus one received copy ($need bytes)"
  for d in "${DATASETS[@]}"; do
    case $d in
      random)
        DS_PATH[$d]=$DATA_DIR/random.bin
        log "dataset random: $SIZE_BYTES bytes from /dev/urandom"
        head -c "$SIZE_BYTES" /dev/urandom >"${DS_PATH[$d]}" ;;
      zeros)
        DS_PATH[$d]=$DATA_DIR/zeros.bin
        log "dataset zeros: $SIZE_BYTES bytes"
        head -c "$SIZE_BYTES" /dev/zero >"${DS_PATH[$d]}" ;;
      text)
        DS_PATH[$d]=$DATA_DIR/text.log
        log "dataset text: $SIZE_BYTES bytes of synthetic syslog/access-log/CSV lines"
        python3 "$SCRIPT_DIR/wan_data.py" text "${DS_PATH[$d]}" "$SIZE_BYTES" 1 ;;
      tree)
        DS_PATH[$d]=$DATA_DIR/tree
        log "dataset tree: $TREE_FILES files of 1-64 KiB"
        python3 "$SCRIPT_DIR/wan_data.py" tree "${DS_PATH[$d]}" "$TREE_FILES" 1
        (cd "$DATA_DIR" && find tree -type f -print0 | sort -z | xargs -0 sha256sum) >"$TMP_DIR/tree.manifest" ;;
      usr)
        DS_PATH[$d]=$DATA_DIR/usr
        log "dataset usr: a copy of /usr/share"
        cp -a /usr/share "${DS_PATH[$d]}"
        (cd "$DATA_DIR" && find usr -type f -print0 | sort -z | xargs -0 sha256sum) >"$TMP_DIR/usr.manifest" ;;
    esac
    if [[ $d == tree || $d == usr ]]; then
      DS_KIND[$d]="tree"
      DS_BYTES[$d]=$(find "${DS_PATH[$d]}" -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
    else
      DS_KIND[$d]="file"
      DS_BYTES[$d]=$(stat -c %s "${DS_PATH[$d]}")
    fi
  done
}

# verify DATASET: 0 when RECV holds an exact copy
verify() {
  local d=$1 name
  name=$(basename "${DS_PATH[$d]}")
  if [[ ${DS_KIND[$d]} == tree ]]; then
    [[ -d $RECV/$name ]] || return 1
    (cd "$RECV" && find "$name" -type f -print0 | sort -z | xargs -0 -r sha256sum) \
      | cmp -s - "$TMP_DIR/$d.manifest"
  else
    cmp -s -- "${DS_PATH[$d]}" "$RECV/$name"
  fi
}

# received_bytes: bytes allocated under RECV (what arrived so far, approximately)
received_bytes() {
  du -sB1 "$RECV" 2>/dev/null | awk '{ print $1 + 0 }'
}

clear_recv() {
  # RECV is our own directory under $SHM_DIR; empty it, keep it
  find "$RECV" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + 2>/dev/null || true
}

# ---- keys and servers ---------------------------------------------------------
HAUL_OK=0
setup_keys() {
  local d=$TMP_DIR/ssh
  mkdir -p "$d"
  chmod 700 "$d"
  ssh-keygen -q -t ed25519 -N '' -C haul-wan-host -f "$d/host_key" </dev/null
  ssh-keygen -q -t ed25519 -N '' -C haul-wan-user -f "$d/user_key" </dev/null
  cp "$d/user_key.pub" "$d/authorized_keys"
  chmod 600 "$d/authorized_keys"
  [[ -d /run/sshd ]] || mkdir -p /run/sshd 2>/dev/null || log "WARNING: cannot create /run/sshd"
  cat >"$d/sshd_config" <<EOF
Port 22
ListenAddress $ADDR_B
HostKey $d/host_key
PidFile none
AuthorizedKeysFile $d/authorized_keys
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
X11Forwarding no
PrintMotd no
UseDNS no
MaxStartups 100
Subsystem sftp internal-sftp
EOF
  /usr/sbin/sshd -t -f "$d/sshd_config" || die "sshd config test failed"
  SSH_OPTS=(-F /dev/null -i "$d/user_key" -o IdentitiesOnly=yes -o BatchMode=yes
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=15)
  SSH_E="ssh ${SSH_OPTS[*]}"

  if [[ -x $HAUL ]]; then
    export HAUL_HOME=$TMP_DIR/haul-home
    mkdir -p "$HAUL_HOME"
    timeout 30 "$HAUL" keygen -f "$HAUL_HOME/server.key" </dev/null >/dev/null 2>&1 || die "haul keygen failed"
    timeout 30 "$HAUL" keygen -f "$HAUL_HOME/client.key" </dev/null >/dev/null 2>&1 || die "haul keygen failed"
    cp "$HAUL_HOME/client.key.pub" "$HAUL_HOME/authorized_keys"
    HAUL_OK=1
  else
    log "WARNING: haul binary not found at $HAUL; haul rows will be marked skipped"
  fi
}

start_servers() {
  local logf
  if ((HAUL_OK)) && want_any haul haul-fresh haul-noenc haul-tcp 'haul-tcp-s[0-9]*' haul-tcp-pull haul-nocomp haul-lz4 haul-zstd; then
    logf=$TMP_DIR/haul-serve-$NS_B.log
    start_bg srv "$logf" "$SERVER_TTL" ip netns exec "$NS_B" "$HAUL" serve --root "$RECV" \
      --listen "$ADDR_B:$HAUL_PORT" --key "$HAUL_HOME/server.key" --authorized-keys "$HAUL_HOME/authorized_keys"
    HAUL_PID=$BG_PID
    wait_listen_b tcp "$HAUL_PORT" "$HAUL_PID" "haul serve" "$logf" || { stop_pid "$HAUL_PID"; HAUL_PID=""; }
  fi
  if want_any scp rsync haul-ssh haul-ssh-relay; then
    logf=$TMP_DIR/sshd-$NS_B.log
    start_bg srv "$logf" "$SERVER_TTL" ip netns exec "$NS_B" /usr/sbin/sshd -f "$TMP_DIR/ssh/sshd_config" -D -e
    SSHD_PID=$BG_PID
    if wait_listen_b tcp 22 "$SSHD_PID" sshd "$logf"; then
      if timeout 30 ip netns exec "$NS_A" ssh "${SSH_OPTS[@]}" "root@$ADDR_B" true </dev/null; then
        ssh_login_sample; ssh_login_sample
      else
        tail -n 20 "$logf" >&2; log "WARNING: ssh login through the link failed"
      fi
    else
      stop_pid "$SSHD_PID"; SSHD_PID=""
    fi
  fi
}

stop_servers() {
  stop_pid "$HAUL_PID"; HAUL_PID=""
  stop_pid "$SSHD_PID"; SSHD_PID=""
}

want_any() {
  local t w
  # shellcheck disable=SC2053 # a wanted name may be a pattern
  for w in "$@"; do for t in "${TOOLS[@]}"; do [[ $t == $w ]] && return 0; done; done
  return 1
}

# ---- emulator -----------------------------------------------------------------
PROF_NAME="" PROF_RATE="" PROF_DELAY="" PROF_LOSS="" LINK_MBIT=""
load_profile() {
  local p
  for p in "${ALL_PROFILES[@]}"; do
    if [[ ${p%%|*} == "$1" ]]; then
      IFS='|' read -r PROF_NAME PROF_RATE PROF_DELAY PROF_LOSS <<<"$p"
      LINK_MBIT=$(awk -v b="$(numfmt --from=si "$PROF_RATE")" 'BEGIN { printf "%.1f", b / 1e6 }')
      return 0
    fi
  done
  die "unknown profile $1"
}

start_emulator() { # start_emulator NAME
  local name=$1 ready=$TMP_DIR/$1.ready logf=$TMP_DIR/$1.emu.log i
  EMU_NAME=$name NS_A=$name-a NS_B=$name-b
  for i in "$NS_A" "$NS_B"; do
    ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx -- "$i" && die "namespace $i already exists"
  done
  NS_NAMES+=("$NS_A" "$NS_B")
  if [[ $EMULATOR == tc ]]; then
    start_tc_link || return 1
    NS_CC=$(ip netns exec "$NS_A" sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo "?")
    return 0
  fi
  rm -f "$ready"
  local args=(--name "$name" --rate "$PROF_RATE" --delay "$PROF_DELAY" --ready-file "$ready"
    --stats-json "$TMP_DIR/$name.stats.json" --seed "${NETEM_SEED:-1}" --mtu "$MTU")
  [[ $PROF_LOSS != 0 ]] && args+=(--loss "$PROF_LOSS")
  log "haul-netem ${args[*]}"
  start_bg emu "$logf" "$SERVER_TTL" "$NETEM" "${args[@]}"
  EMU_PID=$BG_PID
  for ((i = 0; i < 150; i++)); do
    [[ -e $ready ]] && break
    kill -0 "$EMU_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [[ ! -e $ready ]]; then
    tail -n 20 "$logf" >&2
    log "ERROR: haul-netem did not come up within 15 s; this profile's runs are marked failed"
    return 1
  fi
  NS_CC=$(ip netns exec "$NS_A" sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo "?")
}

# --emulator tc: veth pair named like haul-netem's devices, kernel netem qdiscs
start_tc_link() {
  local dev ns limit
  if ! { ip netns add "$NS_A" && ip netns add "$NS_B" \
    && ip link add tun-a netns "$NS_A" type veth peer name tun-b netns "$NS_B" \
    && ip -n "$NS_A" addr add "$ADDR_A/30" dev tun-a \
    && ip -n "$NS_B" addr add "$ADDR_B/30" dev tun-b; }; then
    log "ERROR: could not create the veth stand-in link"
    return 1
  fi
  limit=$(awk -v r="$(numfmt --from=si "$PROF_RATE")" -v d="$PROF_DELAY" \
    'BEGIN { p = int(r * d / 1000 / 8 / 1500) * 2 + 1000; print p }')
  for ns in "$NS_A" "$NS_B"; do
    dev=tun-a; [[ $ns == "$NS_B" ]] && dev=tun-b
    if ! { ip -n "$ns" link set lo up && ip -n "$ns" link set "$dev" up; }; then
      log "ERROR: could not bring up $dev in $ns"
      return 1
    fi
    if ! tc -n "$ns" qdisc add dev "$dev" root netem delay "${PROF_DELAY}ms" \
      rate "$(numfmt --from=si "$PROF_RATE")bit" loss "${PROF_LOSS}%" limit "$limit"; then
      log "ERROR: tc netem failed (is the sch_netem module available?)"
      return 1
    fi
  done
  log "tc stand-in link $NS_A <-> $NS_B: rate $PROF_RATE delay ${PROF_DELAY}ms loss $PROF_LOSS%"
}

stop_emulator() {
  if [[ -n $EMU_PID ]]; then
    stop_pid "$EMU_PID" 15
    [[ -s $TMP_DIR/$EMU_NAME.emu.log ]] && grep -h 'a2b\|b2a' "$TMP_DIR/$EMU_NAME.emu.log" | sed 's/^/    /' >&2
    if [[ -s $TMP_DIR/$EMU_NAME.stats.json ]]; then
      echo "emulator $EMU_NAME ($VARIANT/$PROF_NAME): $(cat "$TMP_DIR/$EMU_NAME.stats.json")" >>"$META.emu"
    fi
  fi
  EMU_PID=""
  delete_our_namespaces
}

apply_tuning() {
  local ns r ok=1
  for ns in "$NS_A" "$NS_B"; do
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_rmem="4096 87380 67108864" \
      net.ipv4.tcp_wmem="4096 65536 67108864" >/dev/null 2>&1 || ok=0
  done
  r=$(ip netns exec "$NS_A" sysctl -n net.core.rmem_max 2>/dev/null || echo "?")
  ((ok)) || log "WARNING: could not set tcp_rmem/tcp_wmem inside the namespaces"
  echo "tuned $PROF_NAME: namespace tcp_rmem/wmem set=$([[ $ok == 1 ]] && echo yes || echo no), namespace net.core.rmem_max=$r" >>"$META.tune"
}

host_tune() {
  HOST_RMEM_ORIG=$(sysctl -n net.core.rmem_max)
  HOST_WMEM_ORIG=$(sysctl -n net.core.wmem_max)
  HOST_SYSCTL_SAVED=1
  if sysctl -q -w net.core.rmem_max=134217728 net.core.wmem_max=134217728 >/dev/null 2>&1; then
    HOST_TUNE_RESULT="permitted (was $HOST_RMEM_ORIG/$HOST_WMEM_ORIG, set 134217728, restored after the tuned runs)"
  else
    HOST_TUNE_RESULT="NOT permitted (kept $HOST_RMEM_ORIG/$HOST_WMEM_ORIG)"
  fi
  log "host net.core.rmem_max/wmem_max=134217728: $HOST_TUNE_RESULT"
}

# ---- runs ---------------------------------------------------------------------
# Each tool function sets R_STATUS (ok|timeout|fail|skipped), R_T0/R_T1 (wall),
# R_NOTE and, for iperf3, R_BYTES. They never abort the script.
R_STATUS="" R_T0="" R_T1="" R_NOTE="" R_BYTES="" R_TL=";;;;;"

rc_status() { # rc_status RC WHAT -> sets R_STATUS/R_NOTE from an exit code
  case $1 in
    0) R_STATUS=ok ;;
    124 | 137) R_STATUS=timeout ;;
    *) R_STATUS=fail; R_NOTE="$2 exit $1" ;;
  esac
}

# client CAP LOG CMD...: run CMD inside NAME-a under a cap, in the cli cgroup;
# sets R_T0/R_T1 around it and returns its exit status.
client() {
  local cap=$1 logf=$2 pid rc=0
  shift 2
  R_T0=$(now)
  cg_exec cli timeout --kill-after=5 "$cap" ip netns exec "$NS_A" "$@" </dev/null >"$logf" 2>"$logf.err" &
  pid=$!
  PIDS+=("$pid")
  wait_pid "$pid" || rc=$?
  R_T1=$(now)
  return "$rc"
}

# haul_timeline JSON: "first_data;full_rate;last_fresh;finished;duration;wire"
# seconds from haul's --json (its timeline_s, P-26), empty fields where absent
haul_timeline() {
  python3 - "$1" <<'PY' 2>/dev/null || echo ";;;;;"
import json, sys
j = json.load(open(sys.argv[1]))
t = j.get("timeline_s", {})
v = [t.get("first_data"), t.get("full_rate"), t.get("last_fresh"), t.get("finished"), j.get("duration_s"), j.get("wire_bytes")]
print(";".join("" if x is None else str(x) for x in v))
PY
}

tool_haul() { # tool_haul DATASET CAP [--no-encrypt]
  local d=$1 cap=$2 flags=() rc=0 json=$TMP_DIR/run.json name
  shift 2
  flags=("$@")
  name=$(basename "${DS_PATH[$d]}")
  [[ ${DS_KIND[$d]} == tree ]] && flags+=(-r)
  if ((!HAUL_OK)) || [[ -z $HAUL_PID ]]; then R_STATUS=skipped; R_NOTE="haul or haul serve unavailable"; return; fi
  client "$cap" "$json" "$HAUL" cp --json -q "${flags[@]}" -i "$HAUL_HOME/client.key" \
    --known-hosts "$HAUL_HOME/known_hosts" "${DS_PATH[$d]}" "$ADDR_B:$HAUL_PORT:$name" || rc=$?
  rc_status "$rc" "haul"
  R_TL=$(haul_timeline "$json")
  if [[ -n ${BENCH_KEEP:-} ]]; then
    local kept
    kept=$BENCH_KEEP/$(date +%s%N)
    cp "$json" "$kept.json"
    cp "$json.err" "$kept.err"
  fi
  if [[ $R_STATUS == fail ]]; then
    R_NOTE="haul exit $rc: $(tail -n 1 "$json.err" | tr ',\n' ';  ' | cut -c1-120)"
  fi
}

# tool_haul_pull DATASET CAP [FLAGS]: the same file the other way: the
# daemon on NAME-b sends it (a hard link in its root, made before the
# clock starts) to the client on NAME-a, into the same place a push puts
# it, so that the same check verifies it.
tool_haul_pull() {
  local d=$1 cap=$2 rc=0 json=$TMP_DIR/run.json name
  shift 2
  name=$(basename "${DS_PATH[$d]}")
  if [[ ${DS_KIND[$d]} == tree ]]; then R_STATUS=skipped; R_NOTE="pull rows take one file"; return; fi
  if ((!HAUL_OK)) || [[ -z $HAUL_PID ]]; then R_STATUS=skipped; R_NOTE="haul or haul serve unavailable"; return; fi
  mkdir -p "$RECV/.pull"
  ln -f "${DS_PATH[$d]}" "$RECV/.pull/$name" 2>/dev/null || cp -- "${DS_PATH[$d]}" "$RECV/.pull/$name"
  client "$cap" "$json" "$HAUL" cp --json -q "$@" -i "$HAUL_HOME/client.key" \
    --known-hosts "$HAUL_HOME/known_hosts" "$ADDR_B:$HAUL_PORT:.pull/$name" "$RECV/$name" || rc=$?
  rm -rf -- "$RECV/.pull"
  rc_status "$rc" "haul"
  R_TL=$(haul_timeline "$json")
  if [[ $R_STATUS == fail ]]; then
    R_NOTE="haul exit $rc: $(tail -n 1 "$json.err" | tr ',\n' ';  ' | cut -c1-120)"
  fi
}

# tool_haul_ssh DATASET CAP [--through-ssh]: no daemon; haul starts
# `haul serve --stdio` on NAME-b through the same sshd scp and rsync use.
# ssh_login_sample: times `ssh host true` through the link once, ssh's own
# login and the yardstick of haul's start over ssh, into $META.ssh. Taken
# when the servers start and right before each run over ssh, so that the
# two medians come from the same minutes.
ssh_login_sample() {
  local t0 t1
  t0=$(date +%s.%N)
  timeout 30 ip netns exec "$NS_A" ssh "${SSH_OPTS[@]}" "root@$ADDR_B" true </dev/null || return 0
  t1=$(date +%s.%N)
  echo "ssh-login $VARIANT $PROF_NAME $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" >>"$META.ssh"
}

tool_haul_ssh() {
  local d=$1 cap=$2 flags=() rc=0 json=$TMP_DIR/run.json
  shift 2
  flags=("$@")
  [[ ${DS_KIND[$d]} == tree ]] && flags+=(-r)
  if ((!HAUL_OK)) || [[ -z $SSHD_PID ]]; then R_STATUS=skipped; R_NOTE="haul or sshd unavailable"; return; fi
  ssh_login_sample
  client "$cap" "$json" "$HAUL" cp --json -q --ssh "${flags[@]}" -e "$SSH_E" --remote-haul "$HAUL" \
    "${DS_PATH[$d]}" "root@$ADDR_B:$RECV/" || rc=$?
  rc_status "$rc" "haul over ssh"
  R_TL=$(haul_timeline "$json")
  if [[ $R_STATUS == fail ]]; then
    R_NOTE="haul exit $rc: $(tail -n 1 "$json.err" | tr ',\n' ';  ' | cut -c1-120)"
  fi
}

tool_scp() {
  local d=$1 cap=$2 rc=0 flags=(-q -B)
  [[ ${DS_KIND[$d]} == tree ]] && flags+=(-r)
  [[ -n $SSHD_PID ]] || { R_STATUS=skipped; R_NOTE="sshd unavailable"; return; }
  client "$cap" "$TMP_DIR/run.out" scp "${flags[@]}" "${SSH_OPTS[@]}" "${DS_PATH[$d]}" "root@$ADDR_B:$RECV/" || rc=$?
  rc_status "$rc" scp
}

tool_rsync() {
  local d=$1 cap=$2 rc=0
  [[ -n $SSHD_PID ]] || { R_STATUS=skipped; R_NOTE="sshd unavailable"; return; }
  client "$cap" "$TMP_DIR/run.out" rsync -a -e "$SSH_E" "${DS_PATH[$d]}" "root@$ADDR_B:$RECV/" || rc=$?
  rc_status "$rc" rsync
}

# tool_nc DATASET CAP COMPRESS DECOMPRESS: nc pipelines, tar for trees. The
# transfer ends when the receiving pipeline exits.
tool_nc() {
  local d=$1 cap=$2 comp=$3 decomp=$4 name parent recv_cmd send_cmd rpid rc=0 rrc=0 logf=$TMP_DIR/nc-recv.log
  name=$(basename "${DS_PATH[$d]}")
  parent=$(dirname "${DS_PATH[$d]}")
  if [[ ${DS_KIND[$d]} == tree ]]; then
    send_cmd="tar -c -C '$parent' '$name'"
    recv_cmd="tar -x -C '$RECV'"
  else
    send_cmd="cat '${DS_PATH[$d]}'"
    recv_cmd="cat > '$RECV/$name'"
  fi
  [[ -n $comp ]] && send_cmd="$send_cmd | $comp"
  [[ -n $decomp ]] && recv_cmd="$decomp | $recv_cmd"
  start_bg srv "$logf" $((cap + 10)) ip netns exec "$NS_B" bash -o pipefail -c \
    "$NC -l $ADDR_B $NC_PORT | $recv_cmd"
  rpid=$BG_PID
  if ! wait_listen_b tcp "$NC_PORT" "$rpid" "nc listener" "$logf"; then
    stop_pid "$rpid"; R_STATUS=fail; R_NOTE="nc listener did not start"; return
  fi
  client "$cap" "$TMP_DIR/run.out" bash -o pipefail -c "$send_cmd | $NC -N $ADDR_B $NC_PORT" || rc=$?
  # the receiver gets what is left of the cap to drain
  local left
  left=$(awk -v c="$cap" -v t0="$R_T0" -v t="$(now)" 'BEGIN { l = c - (t - t0); print (l < 1) ? 1 : int(l) + 1 }')
  local i
  for ((i = 0; i < left * 20; i++)); do kill -0 "$rpid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$rpid" 2>/dev/null; then
    stop_pid "$rpid"; rrc=124
  else
    wait_pid "$rpid" || rrc=$?
  fi
  R_T1=$(now)
  if ((rc == 124 || rc == 137 || rrc == 124 || rrc == 137)); then R_STATUS=timeout
  elif ((rc != 0)); then R_STATUS=fail; R_NOTE="sender exit $rc"
  elif ((rrc != 0)); then R_STATUS=fail; R_NOTE="receiver exit $rrc"
  else R_STATUS=ok; fi
}

tool_uftp() { # tool_uftp DATASET CAP MODE(rate|tfmcc)
  local d=$1 cap=$2 mode=$3 rpid rc=0 logf=$TMP_DIR/uftpd.log cc kbps
  ((UFTP_OK)) || { R_STATUS=skipped; R_NOTE="uftp not installed"; return; }
  kbps=$(awk -v m="$LINK_MBIT" 'BEGIN { printf "%d", m * 1000 * 0.95 }')
  if [[ $mode == tfmcc ]]; then cc=(-C "tfmcc:max=$((kbps * 105 / 95))"); else cc=(-C none -R "$kbps"); fi
  rm -f "$TMP_DIR/uftpd.status" "$TMP_DIR/uftp.status"
  start_bg srv "$logf" $((cap + 15)) ip netns exec "$NS_B" uftpd -d -q -U "$UFTP_UID_B" -p "$UFTP_PORT" \
    -D "$RECV" -B 8388608 -c 8388608 -F "$TMP_DIR/uftpd.status"
  rpid=$BG_PID
  if ! wait_listen_b udp "$UFTP_PORT" "$rpid" uftpd "$logf"; then
    stop_pid "$rpid"; R_STATUS=fail; R_NOTE="uftpd did not start"; return
  fi
  client "$cap" "$TMP_DIR/uftp.log" uftp -M "$ADDR_B" -p "$UFTP_PORT" -U "$UFTP_UID_A" -Y none \
    "${cc[@]}" -B 8388608 -x 1 -S "$TMP_DIR/uftp.status" "${DS_PATH[$d]}" || rc=$?
  stop_pid "$rpid"
  rc_status "$rc" uftp
  if [[ $R_STATUS == fail ]]; then
    R_NOTE="uftp exit $rc: $(grep -v '^\s*$' "$TMP_DIR/uftp.log.err" "$TMP_DIR/uftp.log" 2>/dev/null | tail -n 1 | cut -c1-100 | tr ',' ';')"
  fi
}

tool_iperf3() { # tool_iperf3 CC
  local ccname=$1 spid rc=0 json=$TMP_DIR/iperf3.json logf=$TMP_DIR/iperf3-s.log bps
  start_bg srv "$logf" $((IPERF_TIME + 60)) ip netns exec "$NS_B" iperf3 -s -1 -B "$ADDR_B" -p "$IPERF_PORT"
  spid=$BG_PID
  if ! wait_listen_b tcp "$IPERF_PORT" "$spid" "iperf3 -s" "$logf"; then
    stop_pid "$spid"; R_STATUS=fail; R_NOTE="iperf3 server did not start"; return
  fi
  client $((IPERF_TIME + 40)) "$json" iperf3 -c "$ADDR_B" -p "$IPERF_PORT" -C "$ccname" -t "$IPERF_TIME" -J || rc=$?
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  stop_pid "$spid"
  rc_status "$rc" iperf3
  R_BYTES=$(json_get "$json" .end.sum_received.bytes 2>/dev/null || true)
  bps=$(json_get "$json" .end.sum_received.bits_per_second 2>/dev/null || true)
  if [[ -z $R_BYTES || -z $bps ]]; then
    [[ $R_STATUS == ok ]] && { R_STATUS=fail; R_NOTE="no sum_received in iperf3 JSON"; }
    R_BYTES=""
    return
  fi
  # goodput from iperf3's own interval (receiver side), not our wall clock
  R_T0=0 R_T1=$(awk -v b="$R_BYTES" -v r="$bps" 'BEGIN { printf "%.6f", b * 8 / r }')
}

# run_one DATASET TOOL REP: one measured run, appended to RUNS_CSV
RUN_COUNT=0 SKIP_COUNT=0
run_one() {
  local d=$1 tool=$2 rep=$3 cap expected=0 bytes="" wall="" gp="" c0 s0 e0 c1 s1 e1 cli="" srv="" emu="" elapsed
  R_STATUS="" R_T0="" R_T1="" R_NOTE="" R_BYTES="" R_TL=";;;;;"
  [[ $d == - ]] || expected=${DS_BYTES[$d]}
  cap=$(awk -v m="$CAP" -v b="$expected" -v r="$LINK_MBIT" 'BEGIN { c = 2 * b * 8 / (r * 1e6) + 20; if (c < m) c = m; printf "%d", c }')
  elapsed=$(awk -v t0="$T_START" -v t="$(now)" 'BEGIN { printf "%d", t - t0 }')
  if ((EMU_FAILED)); then
    R_STATUS=fail R_NOTE="emulator did not start"
  elif ((BUDGET > 0 && elapsed >= BUDGET)); then
    R_STATUS=skipped R_NOTE="budget of ${BUDGET}s spent"
    SKIP_COUNT=$((SKIP_COUNT + 1))
  else
    clear_recv
    log "  $VARIANT/$PROF_NAME/$d/$tool rep $rep (cap ${cap}s)"
    c0=$(cg_usage cli) s0=$(cg_usage srv) e0=$(cg_usage emu)
    case $tool in
      haul) tool_haul "$d" "$cap" ;;
      haul-fresh) rm -rf "$HAUL_HOME/known-paths"; tool_haul "$d" "$cap" ;;
      haul-noenc) tool_haul "$d" "$cap" --no-encrypt ;;
      haul-tcp) tool_haul "$d" "$cap" --transport tcp ;;
      haul-tcp-s[0-9]*) tool_haul "$d" "$cap" --transport tcp --streams "${tool#haul-tcp-s}" ;;
      haul-tcp-pull) tool_haul_pull "$d" "$cap" --transport tcp ;;
      haul-nocomp) tool_haul "$d" "$cap" --compress none ;;
      haul-lz4) tool_haul "$d" "$cap" --compress lz4 ;;
      haul-zstd) tool_haul "$d" "$cap" --compress zstd ;;
      haul-ssh) tool_haul_ssh "$d" "$cap" ;;
      haul-ssh-relay) tool_haul_ssh "$d" "$cap" --through-ssh ;;
      scp) tool_scp "$d" "$cap" ;;
      rsync) tool_rsync "$d" "$cap" ;;
      nc) tool_nc "$d" "$cap" "" "" ;;
      nc-zstd) tool_nc "$d" "$cap" "zstd -T0 -q -c" "zstd -d -q -c" ;;
      nc-pigz) tool_nc "$d" "$cap" "pigz -c" "pigz -d -c" ;;
      uftp) tool_uftp "$d" "$cap" rate ;;
      uftp-tfmcc) tool_uftp "$d" "$cap" tfmcc ;;
      iperf3-cubic) tool_iperf3 cubic ;;
      iperf3-bbr) tool_iperf3 bbr ;;
    esac
    c1=$(cg_usage cli) s1=$(cg_usage srv) e1=$(cg_usage emu)
    if [[ -n $c0 ]]; then
      cli=$(calc "$c1 - $c0") srv=$(calc "$s1 - $s0") emu=$(calc "$e1 - $e0")
    fi
    RUN_COUNT=$((RUN_COUNT + 1))
    if [[ -n $R_T0 && -n $R_T1 ]]; then wall=$(calc "$R_T1 - $R_T0"); fi
    if [[ $d == - ]]; then
      bytes=$R_BYTES
    elif [[ $R_STATUS == ok ]]; then
      if verify "$d"; then bytes=$expected
      else R_STATUS=fail R_NOTE="${R_NOTE:+$R_NOTE; }verification failed"; fi
    elif [[ $R_STATUS == timeout ]]; then
      bytes=$(received_bytes)
      ((bytes > expected)) && bytes=$expected
      ((bytes > 0)) || bytes=""
      R_NOTE="${R_NOTE:+$R_NOTE; }killed at ${cap}s cap"
    fi
    if [[ -n $bytes && -n $wall ]] && awk -v w="$wall" 'BEGIN { exit !(w > 0) }'; then
      gp=$(calc "$bytes * 8 / $wall / 1e6")
    fi
    clear_recv
    log "    -> $R_STATUS${gp:+, $(fmt1 "$gp") Mbit/s}${wall:+ in $(fmt1 "$wall") s}${cli:+, cpu cli $(fmt1 "$cli") srv $(fmt1 "$srv") emu $(fmt1 "$emu") s}${R_NOTE:+ ($R_NOTE)}"
  fi
  printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,"%s"\n' "$VARIANT" "$PROF_NAME" "$LINK_MBIT" "$d" "$tool" \
    "$rep" "$R_STATUS" "$bytes" "$expected" "$wall" "$gp" "$cli" "$srv" "$emu" \
    "$(calc "2 * $PROF_DELAY")" "$MTU" "$R_TL" "${R_NOTE//\"/\'}" >>"$RUNS_CSV"
}

# warm_known_path DATASET: one unrecorded push, so that the `haul` row
# measures what it names, a path known from an earlier transfer (its
# first rep was a first contact in the first profile of a run, and one to
# a path of another round trip in the others); `haul-fresh` is the first
# contact.
warm_known_path() {
  local d=$1 cap
  want_any haul && ((!EMU_FAILED)) && [[ $d != - ]] || return 0
  cap=$(awk -v m="$CAP" -v b="${DS_BYTES[$d]}" -v r="$LINK_MBIT" 'BEGIN { c = 2 * b * 8 / (r * 1e6) + 20; if (c < m) c = m; printf "%d", c }')
  clear_recv
  log "  $VARIANT/$PROF_NAME/$d: warm-up push for the known-path row (not recorded)"
  R_STATUS="" R_NOTE=""
  tool_haul "$d" "$cap"
  log "    -> $R_STATUS${R_NOTE:+ ($R_NOTE)}"
  clear_recv
}

run_profile() { # run_profile VARIANT PROFILE INDEX
  local p=$2 idx=$3 d t rep
  VARIANT=$1
  load_profile "$p"
  log "== $VARIANT / $p: rate $PROF_RATE, one-way delay ${PROF_DELAY} ms, loss ${PROF_LOSS}%"
  EMU_FAILED=0
  if start_emulator "hw$$${VARIANT:0:1}$idx"; then
    if [[ $VARIANT == tuned ]]; then apply_tuning; fi
    start_servers
  else
    EMU_FAILED=1
  fi
  # references first: short, fixed duration, so a spent --budget never loses them
  for t in "${TOOLS[@]}"; do
    [[ $t == iperf3-* ]] || continue
    for ((rep = 1; rep <= REPS; rep++)); do run_one - "$t" "$rep"; done
  done
  # Tools take turns within each rep, rather than each running all its reps
  # in a row: the first transfers of a profile ran up to 25% slower (both
  # ends spent more CPU), which always fell on the first tool's reps. Each
  # rep also starts one tool further on, so that no tool always runs in the
  # same place: on 0.11 s pushes of zeros the two modes in the first two
  # places ran 5 ms longer than the next two, where by hand, in any order,
  # all four modes took 101 ms.
  local n=${#TOOLS[@]} k
  for d in "${DATASETS[@]}"; do
    warm_known_path "$d"
    for ((rep = 1; rep <= REPS; rep++)); do
      for ((k = 0; k < n; k++)); do
        t=${TOOLS[$(((k + rep - 1) % n))]}
        [[ $t == iperf3-* ]] && continue
        run_one "$d" "$t" "$rep"
      done
    done
  done
  stop_servers
  stop_emulator
}

write_meta() {
  local cpu
  cpu=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
  {
    echo "haul WAN benchmark $STAMP (bench/wan.sh $*)"
    echo "host: $(uname -n) | kernel $(uname -r) | nproc $(nproc) | cpu $cpu | mem $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "emulator: $EMULATOR ($([[ $EMULATOR == tc ]] && echo 'veth + tc netem stand-in' || echo "$NETEM"))"
    echo "haul: $HAUL ($( ((HAUL_OK)) && timeout 5 "$HAUL" --version 2>/dev/null | head -n 1 || echo missing))"
    echo "datasets: $(for d in "${DATASETS[@]}"; do printf '%s=%s bytes ' "$d" "${DS_BYTES[$d]}"; done)"
    echo "reps: $REPS | cap: max(${CAP}s, 2x ideal + 20s) | iperf3 -t $IPERF_TIME | default cc in namespaces: $NS_CC | CPU accounting: ${CG_MODE:-none}"
    echo "tools: ${TOOLS[*]} | nc-zstd: zstd -T0 (level 3) | nc-pigz: pigz (level 6) | uftp: unicast -M, -Y none, fixed rate 95% of link (uftp-tfmcc: -C tfmcc)"
    echo "host net.core.rmem_max/wmem_max for tuned: $HOST_TUNE_RESULT"
    [[ -s $META.tune ]] && cat "$META.tune"
    [[ -s $META.emu ]] && cat "$META.emu"
    [[ -s $META.ssh ]] && cat "$META.ssh"
    ((SKIP_COUNT)) && echo "WARNING: $SKIP_COUNT run(s) skipped: budget of ${BUDGET}s spent"
    true
  } >"$META"
}

main() {
  local v p i
  STAMP=$(date +%Y%m%d-%H%M%S)
  parse_args "$@"
  ((EUID == 0)) || die "wan.sh must run as root (it creates network namespaces, cgroups and TUN devices); try: sudo $0 $*"
  if [[ $EMULATOR == haul-netem && ! -x $NETEM ]]; then
    die "haul-netem not found at $NETEM (build it: cargo build --release -p netem, or set NETEM=)"
  fi
  ensure_packages
  T_START=$(now)
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  SHM_DIR=$(mktemp -d /dev/shm/haul-wan.XXXXXX)
  TMP_DIR=$(mktemp -d /tmp/haul-wan.XXXXXX)
  DATA_DIR=$SHM_DIR/data RECV=$SHM_DIR/recv
  mkdir -p "$DATA_DIR" "$RECV" "$SCRIPT_DIR/out"
  RUNS_CSV=$TMP_DIR/runs.csv META=$TMP_DIR/meta
  echo "variant,profile,link_mbit,dataset,tool,rep,status,bytes,expected_bytes,wall_s,goodput_mbit_s,cpu_client_s,cpu_server_s,cpu_emu_s,rtt_ms,mtu,timeline,note" >"$RUNS_CSV"
  cg_setup
  make_datasets
  setup_keys
  for v in "${VARIANTS[@]}"; do
    if [[ $v == tuned ]]; then host_tune; fi
    i=0
    for p in "${PROFILES[@]}"; do
      i=$((i + 1))
      run_profile "$v" "$p" "$i"
    done
    if [[ $v == tuned ]]; then restore_host_sysctl; fi
  done
  write_meta "$@"
  local out=$SCRIPT_DIR/out/wan-$STAMP
  cp "$RUNS_CSV" "$out-runs.csv"
  python3 "$SCRIPT_DIR/wan_report.py" "$RUNS_CSV" "$META" "$out.csv" "$out.png"
  log "done in $(awk -v t0="$T_START" -v t="$(now)" 'BEGIN { printf "%d", t - t0 }') s"
}

main "$@"
