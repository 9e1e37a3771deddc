#!/usr/bin/env bash
# scripts/dist.sh: the haul that is shipped: a static x86_64 Linux binary
# (musl), stripped, which runs on any distribution, so that `haul cp
# --push-haul` can copy it to any Linux x86_64 host; plus its shell
# completions and manual pages. Needs the musl target and musl-tools:
#   rustup target add x86_64-unknown-linux-musl
#   apt-get install musl-tools
# Output: dist/haul, dist/completions/, dist/man/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TARGET=x86_64-unknown-linux-musl
cargo build --profile dist --target "$TARGET" -p haul
rm -rf dist && mkdir -p dist/completions dist/man
cp "target/$TARGET/dist/haul" dist/haul
for sh in bash zsh fish; do dist/haul completions "$sh" > "dist/completions/haul.$sh"; done
dist/haul man --out dist/man
file dist/haul 2>/dev/null || true
ls -l dist/haul
sha256sum dist/haul
