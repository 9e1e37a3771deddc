#!/usr/bin/env bash
# bench/shard_plan.sh: how far the shard plan scales (issue 28).
#
# Makes FILES small files (1000 to a directory, sizes 0 to 8 KiB, and one
# large file) in a tmpfs, then times `haul plan --shards SHARDS --emit
# json` over them: the whole command (walking the tree is most of it) and
# the plan alone (its own log line), with the JSON's size. Every shard of a
# real transfer walks and plans the same way before it sends. Needs root
# (the tmpfs).
set -euo pipefail
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$SCRIPT_DIR/lib.sh"
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
HAUL=${HAUL:-$REPO/target/release/haul}
FILES=1000000 SHARDS=100
while (($#)); do
  case $1 in
    --files) FILES=$2; shift 2 ;;
    --shards) SHARDS=$2; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ $(id -u) == 0 ]] || die "needs root (tmpfs)"
W=$(mktemp -d /tmp/haul-planbench.XXXXXX)
cleanup() { umount "$W/t" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/t"
mount -t tmpfs -o size=8g,nr_inodes=$((FILES + FILES / 500 + 100)) tmpfs "$W/t"
log "making $FILES files"
python3 - "$W/t/src" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for d in range((n + 999) // 1000):
    p = os.path.join(root, f"d{d:05}")
    os.makedirs(p)
    for i in range(min(1000, n - d * 1000)):
        with open(os.path.join(p, f"f{i:04}"), "wb") as f:
            f.write(b"x" * ((d * 7 + i * 13) % 8193))
with open(os.path.join(root, "large.bin"), "wb") as f:
    f.truncate(4 << 30)
PY
sync
t0=$(now)
"$HAUL" plan -v --shards "$SHARDS" -r --emit json "$W/t/src/" host:/dst/ > "$W/plan.json" 2> "$W/plan.log"
total=$(calc "$(now) - $t0")
planned=$(grep -o 'planned .* in [0-9.]*[mµn]*s' "$W/plan.log" | tail -1 || true)
printf '\n%s files, %s shards: haul plan took %s s in all (walk and plan); %s\n' "$FILES" "$SHARDS" "$(fmt2 "$total")" "${planned:-plan time not logged}"
printf 'plan JSON: %s bytes; largest shard %s bytes, smallest %s bytes\n' "$(stat -c %s "$W/plan.json")" \
  "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["split"]; print(max(x["bytes"] for x in s), min(x["bytes"] for x in s))' "$W/plan.json" | tr ' ' '\n' | head -1)" \
  "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["split"]; print(min(x["bytes"] for x in s))' "$W/plan.json")"
exit 0
