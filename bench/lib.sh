# bench/lib.sh: helpers shared by bench/loopback.sh, bench/wan.sh and bench/udp.sh.
# shellcheck shell=bash
# Source it; it defines functions only (no side effects). json_get reads the
# global JSON_TOOL (python3 or jq), which the caller sets.

log() { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }
now() { date +%s.%N; }
# calc EXPR: floating-point arithmetic via awk (only ever fed our own numbers)
calc() { awk "BEGIN { printf \"%.6f\", $* }"; }
fmt1() { awk -v x="$1" 'BEGIN { printf "%.1f", x }'; }
fmt2() { awk -v x="$1" 'BEGIN { printf "%.2f", x }'; }

median() {
  printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 }
    END { if (NR % 2) printf "%.6f", a[(NR + 1) / 2]; else printf "%.6f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# median_of_set VALUES...: the median of the non-empty values, or nothing
median_of_set() {
  local v set=()
  for v in "$@"; do [[ -n $v ]] && set+=("$v"); done
  ((${#set[@]})) && median "${set[@]}"
  return 0
}

# to_bytes SIZE: "2G", "512M", "2GiB", "1024" -> bytes (binary multiples)
to_bytes() {
  local s=$1
  s=${s%iB}; s=${s%B}
  numfmt --from=iec "$s" 2>/dev/null || die "bad size: $1"
}

# in_range N MIN MAX: N is a decimal integer within [MIN, MAX]
in_range() {
  [[ $1 =~ ^[0-9]{1,18}$ ]] || return 1
  (( 10#$1 >= $2 && 10#$1 <= $3 ))
}

# json_get FILE PATH...: each PATH like .end.sum_received.bits_per_second;
# prints one line per PATH (empty where absent, booleans as true/false) from
# the last JSON object in FILE (python3 also skips stray non-JSON lines; jq
# needs the file to be pure JSON).
json_get() {
  local file=$1 path
  shift
  if [[ ${JSON_TOOL:-python3} == jq ]]; then
    for path in "$@"; do
      jq -r -s "last | ($path) | if . == null then \"\" else . end" "$file"
    done
  else
    python3 - "$file" "$@" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
dec, i, last = json.JSONDecoder(), 0, None
while True:
    j = text.find("{", i)
    if j < 0:
        break
    try:
        last, i = dec.raw_decode(text, j)
    except ValueError:
        i = j + 1
for path in sys.argv[2:]:
    v = last
    for k in [p for p in path.split(".") if p]:
        v = v.get(k) if isinstance(v, dict) else None
    if isinstance(v, bool):
        v = str(v).lower()
    print("" if v is None else str(v).replace("\n", " "))
PY
  fi
}

pkg_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

avail_bytes() { df -B1 --output=avail "$1" | tail -n 1 | tr -d ' '; }

# ---- background processes and namespaces ------------------------------------
# These act on the caller's arrays: PIDS (background processes the script
# started, and only those) and NS_NAMES (namespaces it created).
# shellcheck disable=SC2154 # PIDS and NS_NAMES belong to the sourcing script

forget_pid() {
  local p keep=()
  for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

wait_pid() {
  local rc=0
  wait "$1" || rc=$?
  forget_pid "$1"
  return "$rc"
}

stop_pid() {
  local pid=$1 secs=${2:-3} i
  [[ -n $pid ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null || true
  forget_pid "$pid"
}

delete_our_namespaces() {
  local n
  for n in "${NS_NAMES[@]}"; do
    if ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx -- "$n"; then
      ip netns del "$n" 2>/dev/null || log "WARNING: could not delete namespace $n"
    fi
  done
  NS_NAMES=()
}

# ---- CPU accounting through a cgroup of our own (v1 cpuacct, or v2) ---------
# cg_base: prints "MODE BASE" of a writable cgroup hierarchy, or nothing.
cg_base() {
  if [[ -f /sys/fs/cgroup/cpuacct/cpuacct.usage && -w /sys/fs/cgroup/cpuacct ]]; then
    echo "v1 /sys/fs/cgroup/cpuacct"
  elif [[ -f /sys/fs/cgroup/cgroup.controllers && -w /sys/fs/cgroup ]]; then
    echo "v2 /sys/fs/cgroup"
  elif [[ -f /sys/fs/cgroup/unified/cgroup.procs && -w /sys/fs/cgroup/unified ]]; then
    echo "v2 /sys/fs/cgroup/unified"
  fi
}

# cg_read MODE DIR: cumulative CPU seconds (user+sys) of the cgroup at DIR
cg_read() {
  if [[ $1 == v1 ]]; then
    awk '{ printf "%.6f", $1 / 1e9 }' "$2/cpuacct.usage"
  else
    awk '$1 == "usage_usec" { printf "%.6f", $2 / 1e6 }' "$2/cpu.stat"
  fi
}

# cpu_per_gb CPU0 CPU1 BYTES: CPU seconds per 10^9 bytes between two readings
# (empty where CPU is not accounted)
cpu_per_gb() {
  [[ -n $1 && -n $2 && $3 -gt 0 ]] || return 0
  calc "($2 - $1) / ($3 / 1e9)"
}
