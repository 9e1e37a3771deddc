//! Every flag, defined once; clap turns these into `--help`.

use std::path::PathBuf;

use crate::units::{parse_age, parse_size};
use clap::{ArgAction, Args, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "haul",
    version,
    about = "Fast, verified, encrypted bulk data mover for long fat networks",
    long_about = "haul moves files and directory trees between hosts over parallel TCP streams\n\
or a rate-controlled UDP channel.\n\
Every block is hashed and every file verified before it appears under its final name;\n\
peers authenticate with static keys (Noise XX) and every frame is sealed with an AEAD.",
    after_help = crate::exit::HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Copy files and trees to or from another host (scp syntax), over ssh
    /// or to a `haul serve` daemon.
    #[command(after_help = CP_HELP)]
    Cp(CpArgs),
    /// Bring a destination up to date: `cp -r -p --update` (rsync -a):
    /// files whose size and time match are skipped, others are sent as
    /// the chunks the destination lacks.
    #[command(after_help = CP_HELP)]
    Sync(CpArgs),
    /// Serve one directory tree to authenticated clients.
    #[command(after_help = crate::exit::HELP)]
    Serve(ServeArgs),
    /// Create a keypair and print its public key.
    Keygen(KeygenArgs),
    /// Check this host against the path it is to fill: socket buffers,
    /// congestion control, UDP buffers, MTUs, CPU, free disk; each line
    /// OK or WARN with the setting to apply and why.
    Doctor(DoctorArgs),
    /// Sample files and tell how well they compress, how much is zeros,
    /// and the goodput each --compress mode would reach on a link.
    Taste(TasteArgs),
    /// Measure the path to a haul server: round trips, loss, path MTU,
    /// memory-to-memory goodput per transport and stream count; advise
    /// settings, which `cp` then uses for that host.
    #[command(after_help = PROBE_HELP)]
    Probe(ProbeArgs),
    /// Carry TCP connections to a service across the link: each connection
    /// accepted on --listen is opened at --to by the peer, all of them
    /// multiplexed, encrypted, over one haul session (like ssh -L, built
    /// for long fat paths).
    #[command(after_help = TUNNEL_HELP)]
    Tunnel(TunnelArgs),
    /// Split one transfer into shards for many hosts: print the split
    /// (--emit json), or write a Slurm batch script (an array of one task
    /// per shard) or a Kubernetes Indexed Job that runs them.
    #[command(after_help = PLAN_HELP)]
    Plan(PlanArgs),
    /// The transfers a daemon runs on its own for this key (submitted
    /// with `cp --detach`, or between two daemons): list, show, follow,
    /// cancel, pause, resume, retry.
    Jobs(JobsArgs),
    /// A login's own daemon for jobs, which `haul cp --detach` starts over
    /// ssh on a host with no `haul serve`; it lets in the keys named and
    /// exits when idle.
    Agent(AgentArgs),
    /// Print a shell's completions for haul, from these very flags:
    /// `haul completions bash > /etc/bash_completion.d/haul`.
    Completions(CompletionsArgs),
    /// Print haul's manual page (roff), or with --out write one page per
    /// command: `haul man --out /usr/local/share/man/man1`.
    Man(ManArgs),
}

#[derive(Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManArgs {
    /// Write haul.1 and haul-COMMAND.1 for every command into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

const PLAN_HELP: &str = "\
Every shard runs `haul cp --shard auto` with the same arguments: it walks the
same sources (a shared or parallel file system), computes the same plan and
moves its share, files whole and large files in block ranges, balanced by
bytes. Shards may send to different receiving hosts, which must share the
destination: a file split across shards is placed there once every piece of
it is verified, by whichever receiver finishes it. A shard that fails can be
run again alone; running one twice is harmless. The last shard's summary says
whether the whole transfer is complete; `haul cp --shard 0/N --shard-status`
asks at any time.

  haul plan --shards 16 --emit slurm -r /lustre/run42/ dtn2:/archive/run42/ > run42.sbatch
  sbatch --wait run42.sbatch";

/// Flags of `haul plan` beside those of `haul cp`.
#[derive(Args)]
pub struct PlanArgs {
    /// How many shards (hosts, array tasks, pods) to split the transfer into.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=wire::MAX_SHARDS as i64))]
    pub shards: u32,
    /// What to write: the plan itself, a Slurm batch script, or a
    /// Kubernetes Indexed Job.
    #[arg(long, value_enum, default_value_t = EmitArg::Json)]
    pub emit: EmitArg,
    /// The haul program the Slurm tasks run [default: this one].
    #[arg(long, value_name = "PATH")]
    pub haul: Option<String>,
    /// The container image the Kubernetes pods run haul from.
    #[arg(long, default_value = "haul:latest")]
    pub image: String,
    /// CPUs each shard asks for. Without it, a Slurm task takes a node of
    /// its own (--exclusive: all its cores, one shard per node), and a pod
    /// asks for one.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub cpus: Option<u32>,
    /// The longest a Slurm task may run ([D-]HH:MM:SS, or minutes).
    #[arg(long, value_name = "TIME", value_parser = parse_slurm_time)]
    pub time: Option<String>,
    /// Memory each pod asks for and may use (Kubernetes).
    #[arg(long, value_name = "QUANTITY", default_value = "1Gi", value_parser = parse_quantity)]
    pub memory: String,
    /// A PersistentVolumeClaim mounted in every pod (Kubernetes), as
    /// CLAIM:MOUNT_PATH; repeat for more.
    #[arg(long = "pvc", value_name = "CLAIM:PATH")]
    pub claims: Vec<String>,
    /// A Secret holding the client key (id_x25519) and known_hosts (the
    /// destination's key pinned), copied into each pod's HAUL_HOME by an
    /// init container (Kubernetes): kubectl create secret generic NAME
    /// --from-file=$HAUL_HOME/id_x25519 --from-file=$HAUL_HOME/known_hosts.
    #[arg(long, value_name = "NAME")]
    pub key_secret: Option<String>,
    #[command(flatten)]
    pub cp: CpArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmitArg {
    Json,
    Slurm,
    Kubernetes,
}

const TUNNEL_HELP: &str = "\
--via is reached as `haul cp` reaches a host: a `haul serve` daemon
(HOST:PORT, --daemon, or a host whose key is pinned), which forwards only to
targets it lists with `serve --tunnel-to`, else a remote side started over
ssh, which forwards anywhere its host reaches. The tunnel runs until stopped
(Ctrl-C) or until the session ends.

Each connection has its own credit-based flow control with a window sized to
the path, and connections take turns on the session's lanes, so a bulk copy
does not hold up an interactive query.

While a tunnel runs, `haul tunnel --stats` prints its connections' bytes
(from $HAUL_HOME/tunnels/).

Examples:
  haul tunnel --listen 15432 --to 127.0.0.1:5432 --via db-west
  haul tunnel --listen 0.0.0.0:3306 --to db:3306 --via dtn1:7050 --streams 8
  haul tunnel --stats";

const PROBE_HELP: &str = "\
HOST is reached as `haul cp` reaches it: a `haul serve` daemon (HOST:PORT,
--daemon, or a host whose key is pinned), else a remote side started over
ssh. Each goodput test sends generated data that the client verifies and
discards, so disks play no part; the tests grow until each lasts about
--seconds. The advice is saved in $HAUL_HOME/probes/ and used by `haul cp`
to that host for 24 hours where --transport and --streams are left
automatic.

Examples:
  haul probe dtn1                 through ssh
  haul probe dtn1:7050 --json     a daemon, as JSON
";

#[derive(Args)]
pub struct ProbeArgs {
    /// The server: HOST, USER@HOST, or HOST:PORT for a daemon.
    #[arg(value_name = "HOST")]
    pub target: String,
    /// About how long each goodput test lasts, and the echo train (at
    /// most 10), seconds.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Measure without encrypting data frames (as `cp --no-encrypt`).
    #[arg(long)]
    pub no_encrypt: bool,
    /// Do not save the advice for `cp` and `doctor`.
    #[arg(long)]
    pub no_save: bool,
    /// Print the findings as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args)]
pub struct TunnelArgs {
    /// Where to accept the connections to carry: PORT (on 127.0.0.1) or
    /// ADDR:PORT.
    #[arg(long, value_name = "[ADDR:]PORT", required_unless_present = "stats")]
    pub listen: Option<String>,
    /// Where the peer connects each one: HOST:PORT, resolved there.
    #[arg(long, value_name = "HOST:PORT", required_unless_present = "stats")]
    pub to: Option<String>,
    /// The haul peer to go through: HOST, USER@HOST, or HOST:PORT for a
    /// daemon.
    #[arg(long, value_name = "PEER", required_unless_present = "stats")]
    pub via: Option<String>,
    /// Data connections (lanes) the tunnel's frames are spread over
    /// (default: chosen from the round trip, as `cp` does).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub streams: Option<u16>,
    /// Authenticate the tunnel's data without encrypting it.
    #[arg(long)]
    pub no_encrypt: bool,
    /// Compression of the tunnel's data, each way: auto (only where it
    /// raises goodput), none, lz4, zstd or zstd:LEVEL.
    #[arg(long, default_value = "auto", value_name = "MODE", value_parser = parse_compress)]
    pub compress: codec::Mode,
    /// Do not keep a byte cache: content that crossed before, in any
    /// connection, is otherwise sent as a reference to it.
    #[arg(long)]
    pub no_cache: bool,
    /// Print the statistics of the running tunnels (or of the one on
    /// --listen's port) and exit.
    #[arg(long, conflicts_with_all = ["to", "via"])]
    pub stats: bool,
    /// With --stats: print JSON.
    #[arg(long, requires = "stats")]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args)]
pub struct DoctorArgs {
    /// Round-trip time of the path, in milliseconds (default: the latest
    /// `haul probe`'s, else 150).
    #[arg(long, value_name = "MS")]
    pub rtt: Option<f64>,
    /// Rate of the path in bits per second: 1G, 500M (default: the latest
    /// `haul probe`'s, else 1G).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// Directory the data is to land in, for its free space.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dest: PathBuf,
    /// Bytes to be written there: 500G, 2T.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Print the checks as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct TasteArgs {
    /// Files or directories (read recursively) to sample.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Link rate to estimate for, in bits per second (default: 100M, 1G
    /// and 10G).
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// Bytes to sample, spread evenly over the data.
    #[arg(long, value_name = "SIZE", default_value = "64M", value_parser = parse_size)]
    pub sample: u64,
    /// Cores at the receiving end (default: as many as here).
    #[arg(long, value_name = "N")]
    pub peer_cores: Option<usize>,
    /// Print the tasting as one JSON object.
    #[arg(long)]
    pub json: bool,
}

const CP_HELP: &str = "\
Locations: [user@]host[:port]:path is remote, anything else local. A
destination of /dev/null discards verified data; '-' writes a single pulled
file to stdout.

Without a daemon: for a host named without a port, and with no `haul serve`
key pinned for it, haul runs your ssh (-e) to start `haul serve --stdio`
there, swaps one-time keys over ssh, and connects directly; if the hosts
cannot connect directly, the data goes through the ssh channel. Remote paths
are then the login's own (relative to its home directory), as with scp.
With a daemon: host:port:path, --daemon, or a host whose key is pinned in
known_hosts connects to `haul serve` (port 7050 by default; paths are
relative to its root).

Examples:
  haul cp big.tar dtn1:/data/               push a file
  haul cp -r dtn1:/data/run42 ./            pull a tree
  haul cp --no-encrypt --streams 16 dtn1:/data/x /dev/null

Transport: by default (--transport auto) data travels over the UDP channel
when the round trip is 50 ms or more, and over parallel TCP streams on
shorter paths or when UDP is blocked. The UDP channel paces datagrams at a
rate it finds by itself (treating random loss as noise, backing off when
queues grow) and re-sends what the receiver reports missing. After `haul
probe HOST`, transport and streams left automatic follow its advice for
that host for 24 hours.

Streams: without --streams haul opens enough TCP streams for their windows
to cover 10 Gbit/s (or --rate) at the measured RTT, at least one per core up
to 4, at most 16.

";

#[derive(Args)]
pub struct Common {
    /// Log more (-v: info, -vv: debug); logs go to stderr.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
}

#[derive(Args)]
pub struct CpArgs {
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DST")]
    pub paths: Vec<String>,
    /// Copy directories recursively. As with rsync, a source ending in '/'
    /// (`dir/`) copies the directory's contents, not the directory itself.
    #[arg(short, long)]
    pub recursive: bool,
    /// Keep modification times and exact modes (scp -p, rsync -t -p).
    /// Without it, files get the receiver's umask and the time they arrive.
    #[arg(short, long)]
    pub preserve: bool,
    /// Show progress even when stderr is not a terminal (one line a second,
    /// for logs); on a terminal a bar is shown anyway, unless -q.
    #[arg(long)]
    pub progress: bool,
    /// Number of parallel TCP streams (default: automatic).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub streams: Option<u16>,
    /// Authenticate and integrity-protect data frames but do not encrypt
    /// them (for trusted links; control stays encrypted).
    #[arg(long)]
    pub no_encrypt: bool,
    /// Cap the sending rate, in bits per second: 500M, 1.5G, 800k. A hard
    /// cap on either transport.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<u64>,
    #[command(flatten)]
    pub share: crate::fairness::ShareArgs,
    /// How data travels: tcp (parallel streams), udp (one rate-controlled
    /// datagram channel), or auto (udp when the RTT is 50 ms or more and
    /// UDP gets through, tcp otherwise).
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    pub transport: TransportArg,
    /// Compression of blocks: auto (per block, only where it raises
    /// goodput, judged from the link's rate and both ends' speed), none,
    /// lz4, zstd (level 3) or zstd:LEVEL (1-19). All-zero blocks are never
    /// sent, whatever this says.
    #[arg(long, default_value = "auto", value_name = "MODE", value_parser = parse_compress)]
    pub compress: codec::Mode,
    /// Skip files already in place: same size and modification time (or,
    /// with --checksum, same content), like rsync's quick check. Keep
    /// times with -p, or every file looks changed next time.
    #[arg(short, long)]
    pub update: bool,
    /// With --update (implied): compare file contents by hash instead of
    /// times; both sides read every file first, as rsync -c does.
    #[arg(short = 'c', long)]
    pub checksum: bool,
    /// Remove files and directories under the destination that the
    /// source does not have: in each directory sent, and with a `dir/`
    /// source in the destination itself (rsync --delete). Needs -r. Try
    /// it with --dry-run first.
    #[arg(long)]
    pub delete: bool,
    /// With --delete: also remove the partials (`.NAME.haul.part`) and
    /// journals that interrupted transfers left and that no transfer
    /// holds now. Without it, --delete keeps every partial, so that any
    /// client can still resume, and never touches one in use.
    #[arg(long)]
    pub delete_partials: bool,
    /// Change nothing: list the files that would be sent (and, with
    /// --delete, removed), then stop.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Do not match files against what the receiver holds. By default a
    /// file that already exists at the destination (or --basis) is cut
    /// into content-defined chunks, and only the chunks the receiver
    /// lacks cross the wire.
    #[arg(long)]
    pub no_dedup: bool,
    /// A file on the receiving side to take unchanged chunks from, for a
    /// single file whose destination does not exist yet (an older version
    /// under another name). Remote paths follow the usual rules.
    #[arg(long, value_name = "FILE")]
    pub basis: Option<String>,
    #[command(flatten)]
    pub cache: CacheArgs,
    /// Block size: 64K to 16M.
    #[arg(long, default_value = "1M", value_parser = parse_block_size)]
    pub block_size: u32,
    /// Print the final statistics as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar and no summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// Send exactly the paths listed in FILE (one a line; `-` reads
    /// standard input), relative to the one source directory, into the
    /// destination directory, with the directories they lie in (rsync's
    /// --files-from). A listed directory is sent with its tree under -r.
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,
    /// With --files-from: the paths are separated by NUL bytes, not lines
    /// (find -print0).
    #[arg(short = '0', long, requires = "files_from")]
    pub from0: bool,
    /// Move only shard I of N of this transfer (0/4 is the first of 4),
    /// or `auto`: the index and count of a Slurm job array task or a
    /// Kubernetes Indexed Job's pod (see `haul plan`).
    #[arg(long, value_name = "I/N|auto")]
    pub shard: Option<String>,
    /// With --shard: say which shards of the transfer are done and
    /// whether it is complete (exit 0 only then); move nothing.
    #[arg(long, requires = "shard")]
    pub shard_status: bool,
    #[command(flatten)]
    pub select: SelectArgs,
    #[command(flatten)]
    pub managed: crate::managed::args::ManagedArgs,
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(flatten)]
    pub s3: S3Args,
    #[command(flatten)]
    pub common: Common,
}

impl CpArgs {
    /// The request's deduplication and sync options (P-31, P-32, P-44).
    pub fn sync_options(&self) -> wire::SyncOptions {
        wire::SyncOptions {
            dedup: !self.no_dedup,
            update: self.update || self.checksum,
            checksum: self.checksum,
            delete: self.delete,
            delete_partials: self.delete_partials,
            dry_run: self.dry_run,
            ignore_existing: self.select.ignore_existing,
            ..Default::default()
        }
    }
}

/// What is sent, as rsync and rclone select it (P-44). Rules apply in the
/// order given, the first match deciding; see `haul help cp`.
#[derive(Args, Clone, Default)]
pub struct SelectArgs {
    /// Leave out paths matching PATTERN (rsync's rules: `*.o`, `/top`,
    /// `dir/`, `**/cache/`); the first rule that matches decides.
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true)]
    pub exclude: Vec<String>,
    /// Send paths matching PATTERN, whatever later rules say.
    #[arg(long, value_name = "PATTERN", allow_hyphen_values = true)]
    pub include: Vec<String>,
    /// --exclude for each line of FILE (`-`: standard input); blank lines
    /// and lines starting with '#' or ';' are skipped.
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<PathBuf>,
    /// --include for each line of FILE.
    #[arg(long, value_name = "FILE")]
    pub include_from: Vec<PathBuf>,
    /// A rule as rsync writes one: `- PATTERN` or `+ PATTERN`.
    #[arg(short = 'f', long, value_name = "RULE", allow_hyphen_values = true)]
    pub filter: Vec<String>,
    /// Skip every file that exists at the destination, whatever it holds.
    #[arg(long)]
    pub ignore_existing: bool,
    /// Leave out files larger than SIZE (10G, 500M, 4096).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_size: Option<u64>,
    /// Leave out files smaller than SIZE.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub min_size: Option<u64>,
    /// Leave out files modified longer ago than AGE (90s, 30m, 12h, 7d,
    /// 2w), as rclone's --max-age.
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub max_age: Option<std::time::Duration>,
    /// Say how each file sent differs from what was in place, in rsync's
    /// letters (`>f+++++++++ new`, `>f.st...... changed`, `*deleting
    /// gone`), on standard output. (-i is --identity, as in scp.)
    #[arg(long)]
    pub itemize_changes: bool,
    /// The rules of all the options above, in the order given (filled
    /// from the command line's order; see `args::ordered_rules`).
    #[arg(skip)]
    pub rules: Vec<String>,
}

/// How an object store is reached: for `s3://`, credentials follow the
/// AWS conventions (environment, `~/.aws/credentials` and `config`,
/// instance metadata); `gs://` and `az://` follow Google's and Azure's
/// (their variables, read by their crates).
#[derive(Args, Clone, Default)]
pub struct S3Args {
    /// The profile of ~/.aws/config and ~/.aws/credentials to use for
    /// s3:// locations (default: AWS_PROFILE, or "default").
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// An S3-compatible store's endpoint for s3:// locations
    /// (MinIO, Ceph RGW, ...): http://10.0.0.5:9000. Default:
    /// AWS_ENDPOINT_URL, else AWS itself. Addressing is then path-style.
    #[arg(long, value_name = "URL")]
    pub s3_endpoint: Option<String>,
    /// The smallest part of an upload in parts to an object-store
    /// destination (5M to 5G; default 8M): bigger parts mean fewer
    /// requests; haul raises it where an object would need more parts
    /// than the store takes (S3: 10,000).
    #[arg(long, alias = "part-size", value_name = "SIZE", value_parser = parse_part_size)]
    pub s3_part_size: Option<u64>,
    /// The region of s3:// locations (default: AWS_REGION, the profile's,
    /// else us-east-1).
    #[arg(long, value_name = "REGION")]
    pub s3_region: Option<String>,
    /// Address buckets by path (`https://HOST/BUCKET/KEY`), as most
    /// S3-compatible stores want; the default for --s3-endpoint.
    #[arg(long, conflicts_with = "s3_virtual_host")]
    pub s3_force_path_style: bool,
    /// Address buckets by host name (`https://BUCKET.HOST/KEY`), also with
    /// --s3-endpoint; AWS's own default.
    #[arg(long)]
    pub s3_virtual_host: bool,
    /// The storage class of objects written: STANDARD, STANDARD_IA,
    /// ONEZONE_IA, INTELLIGENT_TIERING, GLACIER_IR, GLACIER, DEEP_ARCHIVE,
    /// REDUCED_REDUNDANCY, or a store's own.
    #[arg(long, value_name = "CLASS", value_parser = parse_storage_class)]
    pub s3_storage_class: Option<String>,
    /// Server-side encryption of objects written: AES256 (SSE-S3) or
    /// aws:kms (SSE-KMS, with --s3-sse-kms-key-id or the bucket's key).
    #[arg(long, value_name = "ALGORITHM", value_parser = ["AES256", "aws:kms"])]
    pub s3_sse: Option<String>,
    /// The KMS key (id, ARN or alias) of --s3-sse aws:kms.
    #[arg(long, value_name = "KEY")]
    pub s3_sse_kms_key_id: Option<String>,
    /// A canned ACL for objects written.
    #[arg(long, value_name = "ACL", value_parser = ["private", "public-read", "public-read-write", "authenticated-read", "aws-exec-read", "bucket-owner-read", "bucket-owner-full-control"])]
    pub s3_acl: Option<String>,
    /// PEM certificates to trust beside the system's, for a store behind
    /// a private CA (default: AWS_CA_BUNDLE).
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,
}

impl S3Args {
    pub fn settings(&self) -> backends::Settings {
        backends::Settings {
            s3: backends::S3Options {
                profile: self.profile.clone(),
                endpoint: self.s3_endpoint.clone(),
                region: self.s3_region.clone(),
                path_style: match (self.s3_force_path_style, self.s3_virtual_host) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
                ca_bundle: self.ca_bundle.clone(),
                write: backends::S3WriteOptions {
                    storage_class: self.s3_storage_class.clone(),
                    // A KMS key implies SSE-KMS, as aws-cli takes it.
                    sse: self
                        .s3_sse
                        .clone()
                        .or_else(|| self.s3_sse_kms_key_id.as_ref().map(|_| "aws:kms".into())),
                    kms_key_id: self.s3_sse_kms_key_id.clone(),
                    acl: self.s3_acl.clone(),
                },
            },
            tuning: object::Tuning {
                part_size: self.s3_part_size,
                journals: Some(crate::home::dir().join("s3-uploads")),
            },
        }
    }
}

/// How a client reaches the other side: a daemon or ssh, its keys, and
/// time limits (`cp`, `sync`, `probe`).
#[derive(Args)]
pub struct ConnectArgs {
    /// Start the remote side over ssh even if a `haul serve` daemon is
    /// known for the host.
    #[arg(long, conflicts_with = "daemon")]
    pub ssh: bool,
    /// Connect to a `haul serve` daemon, never start one over ssh.
    #[arg(long)]
    pub daemon: bool,
    /// The ssh command and its options, like rsync's -e: "ssh -p 2222 -i
    /// ~/.ssh/dtn". Your ~/.ssh/config, agent and jump hosts apply.
    #[arg(
        short = 'e',
        long = "rsh",
        value_name = "COMMAND",
        env = "HAUL_RSH",
        default_value = "ssh"
    )]
    pub rsh: String,
    /// How to run haul on the remote host, like rsync's --rsync-path:
    /// "/opt/haul/bin/haul", or "sudo haul".
    #[arg(
        long,
        value_name = "PATH",
        env = "HAUL_REMOTE_HAUL",
        default_value = "haul"
    )]
    pub remote_haul: String,
    /// Where the remote host has no haul of this protocol, copy this one
    /// over the ssh channel to its cache (~/.cache/haul/bin), check its
    /// SHA-256 there and run it, without asking first (a terminal is asked;
    /// same system and architecture only).
    #[arg(long)]
    pub push_haul: bool,
    /// Ports the ssh-started remote side binds its data sockets in (TCP
    /// and UDP), for a firewall that opens a range: 7060-7069.
    #[arg(long, value_name = "LO-HI", value_parser = parse_ports)]
    pub remote_ports: Option<connect::PortRange>,
    /// Carry the data through the ssh channel even if the hosts can
    /// connect directly (slower; for firewalls that let only ssh through).
    /// Implies --ssh.
    #[arg(long, conflicts_with = "daemon")]
    pub through_ssh: bool,
    /// Client key (default: $HAUL_HOME/id_x25519, created on first use).
    #[arg(long, short = 'i', value_name = "FILE")]
    pub identity: Option<PathBuf>,
    /// Pinned server keys (default: $HAUL_HOME/known_hosts).
    #[arg(long, value_name = "FILE")]
    pub known_hosts: Option<PathBuf>,
    /// Seconds to wait for a connection.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// Seconds the server may stay silent (an outage, a hung host) before
    /// the transfer gives up; shorter outages are ridden through. What was
    /// verified is kept: the same command again resumes.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub timeout: u64,
    /// TCP congestion control (default: bbr where the kernel offers it).
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TransportArg {
    Tcp,
    Udp,
    Auto,
}

#[derive(Args)]
pub struct ServeArgs {
    /// Serve Prometheus metrics (/metrics) and a live status page (/) on
    /// ADDR:PORT, e.g. 127.0.0.1:9750: sessions by key and outcome, bytes,
    /// wire bytes, savings, retransmissions, errors by exit code, and the
    /// transfers running. Bind it where only operators reach it.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<std::net::SocketAddr>,
    /// A name the metrics may be asked for by (the HTTP Host, as in
    /// http://NAME:9750/metrics), besides an address and localhost;
    /// repeat for more. Any other name is refused, so that a web page
    /// cannot read the status through an operator's browser (DNS
    /// rebinding).
    #[arg(long, value_name = "NAME")]
    pub metrics_host: Vec<String>,
    /// How the daemon logs each finished session: a line of text, or one
    /// JSON object a line (who, what, bytes, wire bytes, seconds, outcome)
    /// for a log collector.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub jobs: crate::managed::args::ServeJobArgs,
    /// The directory tree to serve; nothing outside it is read or written.
    /// Optional with --stdio, where paths are otherwise the login's own
    /// (and `s3://` paths reach the stores this login's credentials do).
    /// `s3://BUCKET/PREFIX` serves objects: pushes land under the prefix
    /// as objects, pulls read them.
    #[arg(long, value_name = "DIR", required_unless_present = "stdio")]
    pub root: Option<PathBuf>,
    /// Address and port to listen on (default 0.0.0.0:7050; with --stdio,
    /// the address ssh came in on and a port the OS picks).
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// Ports for data sockets: the UDP data channel's, and with --stdio the
    /// TCP listener's too (for a firewall that opens a range: 7060-7069).
    #[arg(long, value_name = "LO-HI", value_parser = parse_ports)]
    pub data_ports: Option<connect::PortRange>,
    /// Serve one client that started this over ssh (`haul cp` does): talk
    /// to it on standard input and output, with one-time keys.
    #[arg(long)]
    pub stdio: bool,
    /// Server key (default: $HAUL_HOME/server_x25519, created on first run).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Client public keys allowed in, one per line (default: $HAUL_HOME/authorized_keys).
    #[arg(long, value_name = "FILE")]
    pub authorized_keys: Option<PathBuf>,
    /// Sessions served at once; more get a "busy" answer. One client key
    /// may run half of them, unless `sessions=N` in its line says.
    #[arg(long, default_value_t = 64)]
    pub max_sessions: usize,
    /// Connections one address (an IPv6 /64) may have in their greeting
    /// (not yet authenticated) at once, as sshd's PerSourceMaxStartups;
    /// an address running an authenticated session is not held to it.
    #[arg(long, default_value_t = endpoint::server::PER_SOURCE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub max_startups_per_source: usize,
    /// Seconds a client may stay silent (an outage, a hung host) before
    /// its session ends; what it pushed and was verified is kept for a
    /// resume.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub timeout: u64,
    /// TCP congestion control (default: bbr where the kernel offers it).
    #[arg(long, value_name = "NAME")]
    pub cc: Option<String>,
    /// Let clients tunnel to HOST:PORT (`haul tunnel --to`), exactly as
    /// written there; repeat for more. Without it, no tunnels; with
    /// --stdio, anywhere unless confined by --root or a forced command.
    #[arg(long, value_name = "HOST:PORT")]
    pub tunnel_to: Vec<String>,
    /// Tunnel sessions served at once (each may hold 544 MiB that its
    /// client sends); more get a "busy" answer. They count against
    /// --max-sessions too.
    #[arg(long, default_value_t = 8)]
    pub max_tunnels: usize,
    /// Refuse clients that ask for less than full encryption
    /// (`--no-encrypt`): they get exit code 14.
    #[arg(long)]
    pub require_encryption: bool,
    /// Memory the buffers of all sessions may take together; one session
    /// takes a quarter of it at most (and 1 GiB), and gets fewer streams
    /// than it asks for, or a "busy" answer, when the rest will not do.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = parse_size)]
    pub memory: u64,
    #[command(flatten)]
    pub cache: CacheArgs,
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub s3: S3Args,
}

/// The receiving side's chunk cache.
#[derive(Args, Clone)]
pub struct CacheArgs {
    /// Keep every chunk received in DIR, and let later transfers copy any
    /// chunk seen before, in any file, instead of receiving it (a byte
    /// cache, like a WAN optimizer's). Used by the receiving side: pulls
    /// keep it here; a push over ssh keeps it on the remote host (DIR is a
    /// path there); a daemon uses its own `serve --cache`.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// Most bytes the cache keeps; the least recently used go first.
    #[arg(long, value_name = "SIZE", default_value = "10G", value_parser = parse_size)]
    pub cache_size: u64,
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the secret key; the public key goes to FILE.pub.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Comment stored with the public key.
    #[arg(short = 'C', long)]
    pub comment: Option<String>,
    /// Copy the key (id_x25519, and id_x25519.pub and known_hosts where
    /// there) from DIR into HAUL_HOME, this user's and mode 0600: from a
    /// mounted Kubernetes Secret, which this user may read only through
    /// its group. Generates nothing.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["file", "comment"])]
    pub import: Option<PathBuf>,
}

impl SelectArgs {
    /// What the selection options leave out, as a request carries it
    /// (P-44): one form for `cp`, `sync` and `plan`, whose plan must be
    /// the shards' own. The rules were checked when the command line was
    /// read; `--max-age` counts from now.
    pub fn wire(&self) -> wire::Selection {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        wire::Selection {
            rules: self.rules.clone(),
            min_size: self.min_size.unwrap_or(0),
            max_size: self.max_size.unwrap_or(u64::MAX),
            not_before: self
                .max_age
                .map_or(i64::MIN, |age| now.saturating_sub(age.as_secs() as i64)),
        }
    }
}

/// Slurm's time limit: minutes, or `[D-]HH:MM[:SS]`.
fn parse_slurm_time(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'-')
        && s.split(['-', ':']).all(|w| !w.is_empty())
        && s.matches('-').count() <= 1
        && s.matches(':').count() <= 2;
    match ok {
        true => Ok(s.to_string()),
        false => Err(format!("{s:?} is not a Slurm time; write minutes (90), HH:MM:SS (12:00:00) or D-HH:MM:SS (2-00:00:00)")),
    }
}

/// A Kubernetes memory quantity: digits and a suffix (512Mi, 2Gi, 1G).
fn parse_quantity(s: &str) -> Result<String, String> {
    let digits = s.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &s[digits.len()..];
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && ["", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti"].contains(&suffix);
    match ok {
        true => Ok(s.to_string()),
        false => Err(format!(
            "{s:?} is not a memory quantity; write it as Kubernetes does: 512Mi, 2Gi"
        )),
    }
}

/// The selection options of a `cp` or `sync` command line as rules, in
/// the order the user gave them (rsync's first-match rule needs it).
pub fn ordered_rules(m: &clap::ArgMatches) -> Result<Vec<String>, String> {
    let mut at: Vec<(usize, String)> = Vec::new();
    let mut take = |id: &str, f: &dyn Fn(&str) -> Result<Vec<String>, String>| {
        if let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_raw(id)) {
            for (i, v) in idx.zip(vals) {
                for rule in f(&v.to_string_lossy())? {
                    at.push((i, rule));
                }
            }
        }
        Ok::<(), String>(())
    };
    let one = |include: bool| {
        move |v: &str| {
            filter::Rule::pattern(include, v)
                .map(|r| vec![r.line()])
                .map_err(|e| e.to_string())
        }
    };
    take("exclude", &one(false))?;
    take("include", &one(true))?;
    take("filter", &|v: &str| {
        filter::Rule::parse(v)
            .map(|r| vec![r.line()])
            .map_err(|e| e.to_string())
    })?;
    let from = |include: bool| {
        move |v: &str| {
            let text = match v {
                "-" => std::io::read_to_string(std::io::stdin()),
                p => std::fs::read_to_string(p),
            }
            .map_err(|e| format!("cannot read the rules in {v}: {e}"))?;
            filter::from_file(&text, include)
                .map(|rs| rs.iter().map(filter::Rule::line).collect())
                .map_err(|e| format!("{v}: {e}"))
        }
    };
    take("exclude_from", &from(false))?;
    take("include_from", &from(true))?;
    at.sort_by_key(|(i, _)| *i);
    Ok(at.into_iter().map(|(_, r)| r).collect())
}

/// A storage class as S3 names them: upper-case letters, digits and '_'.
fn parse_storage_class(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    match ok {
        true => Ok(s.to_string()),
        false => Err(format!("{s:?} is not a storage class; write it as S3 does: STANDARD_IA, GLACIER_IR, DEEP_ARCHIVE, ...")),
    }
}

fn parse_part_size(s: &str) -> Result<u64, String> {
    let v = parse_size(s)?;
    let l = object::api::S3_LIMITS;
    if !(l.min_part..=l.max_part).contains(&v) {
        return Err("parts are 5M to 5G".into());
    }
    Ok(v)
}

fn parse_rate(s: &str) -> Result<u64, String> {
    rate::parse_rate(s).ok_or_else(|| {
        format!("{s:?} is not a rate; write it like 500M, 1.5G or 800k (bits per second)")
    })
}

fn parse_compress(s: &str) -> Result<codec::Mode, String> {
    codec::Mode::parse(s).ok_or_else(|| {
        format!("{s:?} is not a compression; write auto, none, lz4, zstd or zstd:LEVEL (1-19)")
    })
}

fn parse_ports(s: &str) -> Result<connect::PortRange, String> {
    connect::PortRange::parse(s)
        .ok_or_else(|| format!("{s:?} is not a port range; write it like 7060-7069 or 7060"))
}

fn parse_block_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        _ => (t, 1),
    };
    let v = num
        .parse::<u64>()
        .map_err(|_| format!("{s:?} is not a size like 4M or 512K"))?
        * mult;
    if !(wire::MIN_BLOCK_SIZE as u64..=wire::MAX_BLOCK_SIZE as u64).contains(&v) {
        return Err(format!("block size {s} is outside 64K..16M"));
    }
    Ok(v as u32)
}

/// `haul jobs`.
#[derive(Args)]
pub struct JobsArgs {
    /// `list [HOST]` (the default), or `show`, `follow`, `cancel`,
    /// `pause`, `resume`, `retry` with a job id. Without a HOST, jobs
    /// submitted from here are looked up on their daemons.
    #[arg(value_name = "ACTION [ID|HOST]")]
    pub words: Vec<String>,
    /// The daemon that holds the job (HOST or HOST:PORT), when it was
    /// not submitted from here.
    #[arg(long, value_name = "HOST")]
    pub on: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
    #[command(flatten)]
    pub common: Common,
}

/// `haul agent`.
#[derive(Args)]
pub struct AgentArgs {
    /// The client key it lets in (may run jobs), hex; repeat for more.
    #[arg(long, value_name = "HEX", required = true)]
    pub key: Vec<String>,
    /// Exit once no session and no unfinished job for this many seconds.
    #[arg(long, default_value_t = 600)]
    pub idle_exit: u64,
    /// Run the agent in this process (what the first process starts).
    #[arg(long, hide = true)]
    pub run: bool,
    #[command(flatten)]
    pub common: Common,
}
