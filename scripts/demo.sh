#!/usr/bin/env bash
# Builds haul and runs a demo transfer on loopback: a server on 127.0.0.1
# with throwaway keys, 512 MiB of generated data pushed and pulled back,
# verified byte for byte, and haul's summary printed. Cleans up after itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"
cargo build --release -q
haul="$PWD/target/release/haul"

work=$(mktemp -d)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work"/{client,server,root,local}
export HAUL_HOME="$work/client"

echo "== keys: a client key, authorized on the server"
"$haul" keygen -f "$work/client/id_x25519" >"$work/server/authorized_keys"

echo "== server: haul serve on 127.0.0.1"
HAUL_HOME="$work/server" "$haul" serve --root "$work/root" --listen 127.0.0.1:0 2>"$work/server.log" &
server_pid=$!
port=""
for _ in $(seq 100); do
    port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$work/server.log")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { cat "$work/server.log"; echo "server did not start" >&2; exit 1; }
sed 's/^/   /' "$work/server.log"

echo "== data: 512 MiB (half random, half zeros) and a small tree"
head -c 268435456 /dev/urandom >"$work/local/data.bin"
head -c 268435456 /dev/zero >>"$work/local/data.bin"
mkdir -p "$work/local/tree/sub"
for i in $(seq 200); do echo "file $i" >"$work/local/tree/sub/f$i.txt"; done

echo "== push: haul cp data.bin 127.0.0.1:$port:/data.bin"
"$haul" cp "$work/local/data.bin" "127.0.0.1:$port:/data.bin"
cmp "$work/local/data.bin" "$work/root/data.bin" && echo "   verified: server copy is identical"

echo "== pull: haul cp 127.0.0.1:$port:/data.bin back.bin"
"$haul" cp "127.0.0.1:$port:/data.bin" "$work/local/back.bin"
cmp "$work/local/data.bin" "$work/local/back.bin" && echo "   verified: pulled copy is identical"

echo "== tree: haul cp -r tree 127.0.0.1:$port:/"
"$haul" cp -r "$work/local/tree" "127.0.0.1:$port:/"
diff -r "$work/local/tree" "$work/root/tree" && echo "   verified: tree is identical"

echo "== memory to memory, as JSON: haul cp --json 127.0.0.1:$port:/data.bin /dev/null"
"$haul" cp --json "127.0.0.1:$port:/data.bin" /dev/null
