#!/usr/bin/env bash
# scripts/test.sh: the README's test command. Installs what the tests
# need on this machine (the programs below, where missing; needs root
# and apt-get for Debian's packages, Go and npm for the rest) and runs
# the whole test suite. `.ci/run` calls it after formatting and lints.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v cargo >/dev/null || . "$HOME/.cargo/env"
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

# The programs tests may run besides haul: the one list. Each line is the
# program, the Debian package that has it (or `go:MODULE@VERSION`, built
# with `go install` through the Go module proxy), and where it lives when
# not on the PATH. netem::programs (crates/netem/src/programs.rs) reads this
# block: tests start programs only through it, and it refuses any program
# not listed; crates/cli/tests/programs.rs fails on a test source that
# names one not listed. Installed below where missing; `npm:PACKAGE@VERSION`
# is installed with npm from its registry into the folder above `.bin`.
PROGRAMS='
ip              iproute2        # network namespaces for the emulator
sysctl          procps          # IPv6 off in the emulator namespaces
mount           mount           # a small tmpfs for the disk-full tests
umount          mount
setpriv         util-linux      # a client run as nobody
runuser         util-linux      # PostgreSQL as user postgres
chown           coreutils
id              coreutils
sshd            openssh-server  /usr/sbin
ssh             openssh-client
ssh-keygen      openssh-client
initdb          postgresql      /usr/lib/postgresql/*/bin
pg_ctl          postgresql      /usr/lib/postgresql/*/bin
pg_basebackup   postgresql      /usr/lib/postgresql/*/bin
psql            postgresql      /usr/lib/postgresql/*/bin
versitygw       go:github.com/versity/versitygw/cmd/versitygw@v1.8.0  target/tools  # a real S3 server
fake-gcs-server go:github.com/fsouza/fake-gcs-server@v1.56.1  target/tools  # the Google Cloud Storage emulator
azurite-blob    npm:azurite@3.35.0  target/tools/azurite/node_modules/.bin  # the Azure Storage emulator, by Microsoft
munged          munge           /usr/sbin   # a one-node Slurm cluster for the shard tests
mungekey        munge           /usr/sbin
slurmctld       slurmctld       /usr/sbin
slurmd          slurmd          /usr/sbin
sbatch          slurm-client
sinfo           slurm-client
chromium        chromium        /usr/bin    # a real browser for the status page test
rsync           rsync                       # filters, itemized changes and --files-from checked against rsync
openssl         openssl                     # a private CA for the S3 server of the --ca-bundle test
'

# Install the package of every listed program that is missing.
missing=()
while read -r prog pkg place _; do
    [[ -z "$prog" || "$prog" == \#* ]] && continue
    found=""
    if [[ -n "$place" && "$place" != \#* ]]; then
        for d in $place; do [[ -x "$d/$prog" ]] && found=1; done
    elif command -v "$prog" >/dev/null 2>&1; then
        found=1
    fi
    if [[ -z "$found" && "$pkg" == go:* ]]; then
        echo "== building for the tests: ${pkg#go:}"
        GOBIN="$(pwd)/$place" go install "${pkg#go:}" ||
            echo "(could not build ${pkg#go:}: the tests that need $prog say SKIPPED)"
        continue
    fi
    if [[ -z "$found" && "$pkg" == npm:* ]]; then
        echo "== installing for the tests: ${pkg#npm:}"
        mkdir -p "${place%/node_modules/.bin}"
        (cd "${place%/node_modules/.bin}" && npm install --no-audit --no-fund -q "${pkg#npm:}" >/dev/null) ||
            echo "(could not install ${pkg#npm:}: the tests that need $prog say SKIPPED)"
        continue
    fi
    if [[ -z "$found" && " ${missing[*]-} " != *" $pkg "* ]]; then
        missing+=("$pkg")
    fi
done <<<"$PROGRAMS"
if [[ ${#missing[@]} -gt 0 ]] && command -v apt-get >/dev/null; then
    echo "== installing for the tests: ${missing[*]}"
    if ! apt-get install -y -q "${missing[@]}" >/dev/null; then
        apt-get update -q >/dev/null || true
        apt-get install -y -q "${missing[@]}" >/dev/null ||
            echo "(could not install ${missing[*]}: the tests that need them say SKIPPED)"
    fi
fi

echo "== tests"
if [[ $# -eq 0 ]]; then
    cargo test --workspace
else
    cargo test "$@"
fi
