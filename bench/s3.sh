#!/usr/bin/env bash
# bench/s3.sh: objects across an emulated long link, haul against rclone.
#
# Two namespaces joined by haul-netem (a: 198.18.0.1, b: 198.18.0.2). A real
# S3 server (versitygw) runs on each side: the source bucket in a, the
# destination bucket in b. Cases, each rep in turn (medians of --reps):
#   haul-file     a file (a) -> haul -> a haul serve's disk in b: the same
#                 path without a store, what haul reaches in this cell
#   haul-disk     bucket (a) -> haul -> a haul serve's disk in b
#   haul-bucket   bucket (a) -> haul -> haul serve --root s3:// in b -> bucket (b)
#   rclone-sftp   rclone copy, bucket (a) -> sftp to b's disk (OpenSSH)
#   rclone-s3     rclone copy, bucket (a) -> bucket (b), its S3 remote across the link
# and on loopback (no emulator), with both buckets on one server:
#   lo-haul       bucket -> haul (client and daemon here) -> bucket
#   lo-read       what the S3 server alone serves to a local reader
#                 (rclone, 16 ranged streams, into /dev/shm)
#   lo-write      what the S3 server alone takes from a local writer
#                 (rclone, 16 parts in flight, from /dev/shm)
# --tls serves every bucket over HTTPS (a CA made here, trusted through
# SSL_CERT_FILE and RCLONE_CA_CERT), as real stores are: payloads then travel
# unsigned with their CRC32C, for haul and rclone alike.
# Goodput = object bytes x 8 / wall time; the copy is compared with cmp.
# CPU-s/GB: every process of the case (both ends, both S3 servers), not the
# emulator, from a cgroup of this script's. Needs root, versitygw in
# target/tools (see README) and rclone (GOBIN=$PWD/target/tools go install
# github.com/rclone/rclone@v1.71.2).
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
NETEM=${NETEM:-$REPO/target/release/haul-netem}
VGW=${VGW:-$REPO/target/tools/versitygw}
RCLONE=${RCLONE:-$REPO/target/tools/rclone}
SIZE=512M REPS=5 RATE=1000M DELAY=75 LOSS=0 TLS=0 CASES=haul-file,haul-disk,haul-bucket,rclone-sftp,rclone-s3,lo-haul,lo-read,lo-write
while (($#)); do
  case $1 in
    --size) SIZE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --tls) TLS=1; shift ;;
    -h|--help) sed -n 2,27p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root (namespaces)"
for p in "$HAUL" "$NETEM" "$VGW"; do [[ -x $p ]] || die "missing $p"; done
BYTES=$(to_bytes "$SIZE")
NAME=hs3$$ A=198.18.0.1 B=198.18.0.2 KEY=benchkey SECRET=benchsecret0123456789
W=$(mktemp -d /tmp/haul-s3bench.XXXXXX)
PIDS=() NS_NAMES=("$NAME-a" "$NAME-b")
read -r CG_MODE CG_BASE <<<"$(cg_base)"
CG=""
if [[ -n ${CG_MODE:-} ]] && mkdir "$CG_BASE/haul-s3bench-$$" 2>/dev/null; then
  CG=$CG_BASE/haul-s3bench-$$
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
  umount "$W/shm" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT
cpu() { if [[ -n $CG ]]; then cg_read "$CG_MODE" "$CG"; else echo 0; fi; }
# inside NS CMD...: runs CMD in the namespace (or here for "-"), in our
# cgroup; only ever in a subshell (`&`, or in_fg), which it replaces
inside() {
  local ns=$1; shift
  # Joined here: inside a namespace, /sys is that namespace's.
  [[ -z $CG ]] || echo "$BASHPID" > "$CG/cgroup.procs"
  if [[ $ns == - ]]; then exec "$@"; else exec ip netns exec "$ns" "$@"; fi
}
# in_fg NS CMD...: the same, in the foreground
in_fg() { (inside "$@"); }
s3env() { env AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL="$1" "${@:2}"; }

log "emulator: $RATE, ${DELAY} ms one way, loss $LOSS %"
emu_args=(--name "$NAME" --rate "$RATE" --delay "$DELAY" --ready-file "$W/ready" --seed 1 --mtu 1500)
[[ $LOSS != 0 ]] && emu_args+=(--loss "$LOSS")
setsid "$NETEM" "${emu_args[@]}" >"$W/emu.log" 2>&1 & PIDS+=($!)
for _ in $(seq 100); do [[ -e $W/ready ]] && break; sleep 0.1; done
[[ -e $W/ready ]] || die "emulator did not start: $(cat "$W/emu.log")"

mkdir -p "$W/s3a/src" "$W/s3b/dst" "$W/s3lo/src" "$W/s3lo/dst" "$W/disk" "$W/home-a" "$W/home-b" "$W/shm"
head -c "$BYTES" /dev/urandom > "$W/data.bin"
SCHEME=http VGW_TLS=()
if ((TLS)); then
  # A CA and a server certificate for all three addresses: rustls takes no
  # self-signed CA certificate as a server's own.
  mkdir -p "$W/tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=haul-bench-ca \
    -keyout "$W/tls/ca.key" -out "$W/tls/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=haul-bench-s3 \
    -keyout "$W/tls/key.pem" -out "$W/tls/req.pem" 2>/dev/null
  printf 'subjectAltName=IP:%s,IP:%s,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$A" "$B" > "$W/tls/ext"
  openssl x509 -req -in "$W/tls/req.pem" -CA "$W/tls/ca.pem" -CAkey "$W/tls/ca.key" -CAcreateserial \
    -days 2 -extfile "$W/tls/ext" -out "$W/tls/cert.pem" 2>/dev/null
  export SSL_CERT_FILE=$W/tls/ca.pem RCLONE_CA_CERT=$W/tls/ca.pem
  SCHEME=https VGW_TLS=(--cert "$W/tls/cert.pem" --key "$W/tls/key.pem")
fi
inside "$NAME-a" "$VGW" -a $KEY -s $SECRET -q "${VGW_TLS[@]}" -p "$A:7070" posix "$W/s3a" >/dev/null 2>&1 & PIDS+=($!)
inside "$NAME-b" "$VGW" -a $KEY -s $SECRET -q "${VGW_TLS[@]}" -p "$B:7070" posix "$W/s3b" >/dev/null 2>&1 & PIDS+=($!)
inside - "$VGW" -a $KEY -s $SECRET -q "${VGW_TLS[@]}" -p "127.0.0.1:7071" posix "$W/s3lo" >/dev/null 2>&1 & PIDS+=($!)
sleep 1
HAUL_HOME=$W/home-a "$HAUL" keygen -f "$W/home-a/id_x25519" > "$W/home-b/authorized_keys" 2>/dev/null
cp "$W/home-b/authorized_keys" "$W/home-a/authorized_keys"
# The source objects, put there by haul itself from a local daemon.
inside - env HAUL_HOME="$W/home-b" "$HAUL" serve --root "$W" --listen 127.0.0.1:7059 >/dev/null 2>&1 & PIDS+=($!)
sleep 0.5
HAUL_HOME=$W/home-a s3env $SCHEME://127.0.0.1:7071 "$HAUL" cp -q --daemon 127.0.0.1:7059:data.bin s3://src/data.bin
ip netns exec "$NAME-a" env HAUL_HOME="$W/home-b" "$HAUL" serve --root "$W" --listen "$A:7059" >/dev/null 2>&1 & PIDS+=($!)
sleep 0.5
ip netns exec "$NAME-a" env HAUL_HOME="$W/home-a" AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL="$SCHEME://$A:7070" "$HAUL" cp -q --daemon "$A:7059:data.bin" s3://src/data.bin
# Far side: a daemon on disk, one on the far bucket, sshd for rclone's sftp.
inside "$NAME-b" env HAUL_HOME="$W/home-b" "$HAUL" serve --root "$W/disk" --listen "$B:7050" >/dev/null 2>&1 & PIDS+=($!)
inside "$NAME-b" env HAUL_HOME="$W/home-b" AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL="$SCHEME://$B:7070" "$HAUL" serve --root s3://dst/ --listen "$B:7051" >/dev/null 2>&1 & PIDS+=($!)
inside - env HAUL_HOME="$W/home-b" AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL=$SCHEME://127.0.0.1:7071 "$HAUL" serve --root s3://dst/ --listen 127.0.0.1:7052 >/dev/null 2>&1 & PIDS+=($!)
ssh-keygen -q -t ed25519 -N '' -f "$W/host_key"; ssh-keygen -q -t ed25519 -N '' -f "$W/user_key"
cp "$W/user_key.pub" "$W/authorized_keys_ssh"; chmod 600 "$W/authorized_keys_ssh"
printf 'Port 22\nListenAddress %s\nHostKey %s\nPidFile none\nAuthorizedKeysFile %s\nStrictModes no\nUsePAM no\nPermitRootLogin prohibit-password\nUseDNS no\nSubsystem sftp internal-sftp\n' \
  "$B" "$W/host_key" "$W/authorized_keys_ssh" > "$W/sshd_config"
mkdir -p /run/sshd
inside "$NAME-b" /usr/sbin/sshd -f "$W/sshd_config" -D -e >"$W/sshd.log" 2>&1 & PIDS+=($!)
sleep 1

RC_S3A=":s3,provider=Other,access_key_id=$KEY,secret_access_key=$SECRET,endpoint='$SCHEME://$A:7070',no_check_bucket=true"
RC_S3B=":s3,provider=Other,access_key_id=$KEY,secret_access_key=$SECRET,endpoint='$SCHEME://$B:7070',no_check_bucket=true"
RC_S3LO=":s3,provider=Other,access_key_id=$KEY,secret_access_key=$SECRET,endpoint='$SCHEME://127.0.0.1:7071',no_check_bucket=true"
RC_SFTP=":sftp,host=$B,user=root,key_file='$W/user_key'"

# run CASE: one rep; prints "seconds cpu_seconds" or nothing when it failed.
run() {
  local t0 t1 c0 c1 ok=0
  rm -rf "$W/disk/data.bin" "$W/s3b/dst/data.bin" "$W/s3lo/dst/data.bin" "$W/shm/data.bin" "$W/disk/rc"
  sync; c0=$(cpu); t0=$(now)
  case $1 in
    haul-file) in_fg "$NAME-a" env HAUL_HOME="$W/home-a" "$HAUL" cp -q --daemon "$W/data.bin" "$B:7050:data.bin" && cmp -s "$W/data.bin" "$W/disk/data.bin" && ok=1 ;;
    haul-disk) in_fg "$NAME-a" env HAUL_HOME="$W/home-a" AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL="$SCHEME://$A:7070" "$HAUL" cp -q --daemon s3://src/data.bin "$B:7050:data.bin" && cmp -s "$W/data.bin" "$W/disk/data.bin" && ok=1 ;;
    haul-bucket) in_fg "$NAME-a" env HAUL_HOME="$W/home-a" AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL="$SCHEME://$A:7070" "$HAUL" cp -q --daemon s3://src/data.bin "$B:7051:data.bin" && cmp -s "$W/data.bin" "$W/s3b/dst/data.bin" && ok=1 ;;
    rclone-sftp) in_fg "$NAME-a" "$RCLONE" copyto -q "$RC_S3A:src/data.bin" "$RC_SFTP:$W/disk/data.bin" && cmp -s "$W/data.bin" "$W/disk/data.bin" && ok=1 ;;
    rclone-s3) in_fg "$NAME-a" "$RCLONE" copyto -q "$RC_S3A:src/data.bin" "$RC_S3B:dst/data.bin" && cmp -s "$W/data.bin" "$W/s3b/dst/data.bin" && ok=1 ;;
    lo-haul) in_fg - env HAUL_HOME="$W/home-a" AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_EC2_METADATA_DISABLED=true AWS_ENDPOINT_URL=$SCHEME://127.0.0.1:7071 "$HAUL" cp -q --daemon s3://src/data.bin 127.0.0.1:7052:data.bin && cmp -s "$W/data.bin" "$W/s3lo/dst/data.bin" && ok=1 ;;
    lo-write) in_fg - "$RCLONE" copyto -q --s3-upload-concurrency 16 --s3-chunk-size 8M "$W/shm/src.bin" "$RC_S3LO:dst/data.bin" && cmp -s "$W/data.bin" "$W/s3lo/dst/data.bin" && ok=1 ;;
    lo-read) in_fg - "$RCLONE" copyto -q --multi-thread-streams 16 --multi-thread-cutoff 1M "$RC_S3LO:src/data.bin" "$W/shm/data.bin" && cmp -s "$W/data.bin" "$W/shm/data.bin" && ok=1 ;;
  esac
  t1=$(now); c1=$(cpu)
  ((ok)) && echo "$(calc "$t1 - $t0") $(calc "$c1 - $c0")"
  return 0
}
# lo-read writes into /dev/shm: a tmpfs, so the reader is not a disk.
mount -t tmpfs -o size=$((BYTES * 3)) tmpfs "$W/shm" 2>/dev/null || true
cp "$W/data.bin" "$W/shm/src.bin"

IFS=, read -r -a cases <<< "$CASES"
declare -A secs cpus
for ((r = 1; r <= REPS; r++)); do
  for c in "${cases[@]}"; do
    [[ $c == rclone-* || $c == lo-read || $c == lo-write ]] && [[ ! -x $RCLONE ]] && continue
    out=$(run "$c" 2>>"$W/errors.log" || true)
    log "rep $r $c: ${out:-FAILED}"
    [[ -n $out ]] && { secs[$c]+="${out% *} "; cpus[$c]+="${out#* } "; }
  done
done
umount "$W/shm" 2>/dev/null || true
rate_bps=$(to_bytes "${RATE%M}M"); rate_bps=$((rate_bps / 1048576 * 1000000))
limit=$(calc "$BYTES * 8 / ($BYTES * 8 / ($rate_bps * 0.965) + 2 * $DELAY * 2 / 1000) / 1e6")
printf '\n%s of random data, link %s, RTT %s ms, loss %s %%, stores over %s: limit %s Mbit/s (96.5%% of the link, two round trips)\n' \
  "$SIZE" "$RATE" "$((DELAY * 2))" "$LOSS" "$SCHEME" "$(fmt1 "$limit")"
printf '%-12s %10s %8s %9s %6s\n' case Mbit/s "of limit" "CPU-s/GB" runs
best_other=0
for c in "${cases[@]}"; do
  [[ -n ${secs[$c]:-} ]] || { printf '%-12s %10s\n' "$c" "-"; continue; }
  # shellcheck disable=SC2086
  s=$(median ${secs[$c]}); cp_=$(median ${cpus[$c]})
  g=$(calc "$BYTES * 8 / $s / 1e6"); n=$(wc -w <<< "${secs[$c]}")
  ratio=$(fmt2 "$(calc "$g / $limit")")
  [[ $c == lo-* ]] && ratio=-   # loopback: no link to compare with
  printf '%-12s %10s %8s %9s %6s\n' "$c" "$(fmt1 "$g")" "$ratio" "$(fmt2 "$(calc "$cp_ / ($BYTES / 1e9)")")" "$n"
  [[ $c == rclone-* ]] && awk -v g="$g" -v b="$best_other" 'BEGIN { exit !(g > b) }' && best_other=$g
  declare "good_${c//-/_}=$g"
done
[[ -n ${good_lo_haul:-} && -n ${good_lo_read:-} ]] &&
  printf 'lo-haul / lo-read (bucket to bucket against what the server alone serves): %s\n' "$(fmt2 "$(calc "$good_lo_haul / $good_lo_read")")"
[[ -n ${good_lo_haul:-} && -n ${good_lo_write:-} ]] &&
  printf 'lo-haul / lo-write (bucket to bucket against what the server alone takes): %s\n' "$(fmt2 "$(calc "$good_lo_haul / $good_lo_write")")"
[[ $best_other != 0 ]] && for c in haul-disk haul-bucket; do
  [[ -n ${secs[$c]:-} ]] || continue
  # shellcheck disable=SC2086
  g=$(calc "$BYTES * 8 / $(median ${secs[$c]}) / 1e6")
  printf '%s / best rclone: %s\n' "$c" "$(fmt2 "$(calc "$g / $best_other")")"
done
[[ -s $W/errors.log ]] && { log "errors:"; tail -20 "$W/errors.log" >&2; }
exit 0
