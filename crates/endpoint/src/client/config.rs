//! What a client is set up with: whom it connects to and how it trusts
//! it, the transport and streams, `haul probe`'s advice, and how it
//! reached the server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use secure::{Keypair, Protection, PublicKey};
use wire::{TRANSPORT_TCP, TRANSPORT_UDP};

use connect::net::Tuning;

/// A callback that shows a one-line notice to the user.
pub type Notice = Box<dyn Fn(&str) + Send>;

/// Opens a connection to the server some other way than by dialling it,
/// within the time given: a connection a job's client relays
/// (`--through-client`, P-45 J-11). The server's key is checked as ever.
pub type Relay = Arc<dyn Fn(Duration) -> std::io::Result<std::net::TcpStream> + Send + Sync>;

/// How blocks travel (`--transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
    /// UDP on long paths, TCP otherwise: see [`choose_transport`].
    Auto,
}

impl Transport {
    /// The request's transport code; auto asks for TCP.
    pub(super) fn wire(self) -> u8 {
        match self {
            Transport::Udp => TRANSPORT_UDP,
            _ => TRANSPORT_TCP,
        }
    }
}

/// Round trip from which `--transport auto` picks the UDP channel. At
/// 30 ms (100 Mbit/s, a 557 MB tree) TCP streams took 18.0-18.2 s in every
/// run, the UDP channel 18.1-27 s: one-way-delay noise from cores shared
/// with the receiver's file creation is a large share of the controller's
/// 10 ms congestion threshold there. TCP's window and loss-recovery costs
/// grow with the round trip; at 150 ms the UDP channel wins (P-23).
pub const AUTO_UDP_RTT: Duration = Duration::from_millis(50);

/// The `--transport auto` rule (documented in docs/PROTOCOL.md, P-23): the
/// UDP channel when the handshake's round trip is at least
/// [`AUTO_UDP_RTT`], where TCP's loss recovery and window limits cost the
/// most; TCP streams on short paths, where the kernel's TCP is cheaper
/// than user-space pacing. If the UDP channel cannot be set up (a
/// firewall), auto falls back to TCP and says so.
pub fn choose_transport(t: Transport, rtt: Duration) -> Transport {
    match t {
        Transport::Auto if rtt >= AUTO_UDP_RTT => Transport::Udp,
        Transport::Auto => Transport::Tcp,
        t => t,
    }
}

/// What of `haul probe`'s recommendation a client applies (P-36).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Advice {
    pub transport: Transport,
    pub streams: u16,
    /// Bytes per second.
    pub rate: u64,
}

/// What the last transfer to the same host measured of its path: the UDP
/// channel of the next one starts at this rate when the round trip is
/// about the same (P-26).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownPath {
    /// The UDP sender's capacity estimate, bytes per second; 0 if no push
    /// over UDP measured it.
    pub rate: u64,
    /// Wire bytes per second that a push over TCP streams moved while
    /// data flowed; 0 if none did. The streams of the next transfer are
    /// sized for a quarter more than the larger of the two.
    pub tcp_rate: u64,
    /// What a push's TCP streams delivered together at their most, bytes
    /// per second (P-46); 0 if none measured it. Where known, the next
    /// push's ceiling is sized from it rather than from a quarter over
    /// `tcp_rate`.
    pub tcp_peak: u64,
    pub rtt: Duration,
    /// The UDP payload a push over the channel used, bytes; 0 if none.
    /// A pinned start sends data right behind its hello at this size
    /// (P-48).
    pub udp_payload: u64,
}

impl KnownPath {
    /// Whether a path of round trip `rtt` looks like the one measured:
    /// within a fifth (at least 5 ms) of its round trip. A different
    /// route, or another host behind the same name, probes afresh.
    pub fn fits(&self, rtt: Duration) -> bool {
        let slack = (self.rtt / 5).max(Duration::from_millis(5));
        rtt + slack >= self.rtt && rtt <= self.rtt + slack
    }

    /// Whether `rtt` could be this path's with a queue standing in it: from
    /// its own round trip (less the slack) to twice that (a full queue of
    /// one bandwidth-delay product doubles it). A transfer that joins a
    /// busy path measures such a round trip at its handshake.
    pub fn fits_queued(&self, rtt: Duration) -> bool {
        let slack = (self.rtt / 5).max(Duration::from_millis(5));
        rtt + slack >= self.rtt && rtt <= self.rtt * 2 + slack
    }
}

/// How the client decides whether the server's key is the right one.
#[derive(Debug, Clone)]
pub enum ServerTrust {
    /// Keys pinned on first use in this known-hosts file (a `haul serve`
    /// daemon).
    KnownHosts(PathBuf),
    /// Exactly this key: the one-time key a remote `haul serve --stdio`
    /// sent over ssh (P-27).
    Key(PublicKey),
}

pub struct ClientConfig {
    pub identity: Keypair,
    pub trust: ServerTrust,
    /// Host as the user wrote it (name or address).
    pub host: String,
    pub port: u16,
    /// Addresses to connect to instead of resolving `host`.
    pub dial: Vec<SocketAddr>,
    /// `None`: choose by the rule in [`auto_streams`].
    pub streams: Option<u16>,
    pub block_size: u32,
    pub protection: Protection,
    /// Bytes per second.
    pub rate: Option<u64>,
    pub transport: Transport,
    /// `-p`: keep modification times and exact modes (P-8).
    pub preserve: bool,
    /// `--compress`: how the sending side compresses blocks (P-30).
    pub compress: codec::Mode,
    /// Deduplication and sync (P-31, P-32); `gated` is decided here.
    pub sync: wire::SyncOptions,
    /// `--basis`: the basis of the one file sent, on the receiving side.
    pub basis: Option<String>,
    /// `--cache`: this side's chunk cache, when it receives (pull).
    pub cache: Option<Arc<store::ChunkCache>>,
    pub tuning: Tuning,
    pub connect_timeout: Duration,
    /// Shows the user a notice: a server key pinned for the first time, a
    /// fallback from UDP to TCP.
    pub notice: Option<Notice>,
    /// What `haul probe` advised for this host (P-36): used where the
    /// user left transport and streams automatic.
    pub advice: Option<Advice>,
    /// What the last transfer to this host measured (P-26).
    pub known_path: Option<KnownPath>,
    /// Automatic transport asked for the UDP channel to this host within
    /// the last day and got none: it takes TCP streams at once instead of
    /// waiting seconds for an answer again (P-23). `--transport udp`
    /// still asks.
    pub udp_blocked: bool,
    /// `--shard`: this push is one shard of a split transfer (P-42).
    pub shard: Option<wire::ShardSpec>,
    /// What is sent and what `--delete` leaves alone (P-44): a push's
    /// sources are selected before they are sent; a pull's by the server.
    pub select: wire::Selection,
    /// `--itemize-changes`: how each file differs from what was in place
    /// is reported (P-44).
    pub itemize: bool,
    /// Connections come from here instead of being dialled (TCP only).
    pub relay: Option<Relay>,
    /// `--fair`, `--background`: how the sending side shares the path
    /// (P-46).
    pub share: rate::Share,
}

/// How the client reached the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Route {
    /// A `haul serve` daemon.
    #[default]
    Daemon,
    /// A server started over ssh, data on direct connections (P-27).
    Ssh,
    /// A server started over ssh, data through the ssh channel (P-28).
    SshRelay,
    /// Both ends in this process: a copy on one host.
    Local,
    /// No bytes moved by haul: the object store copied its objects itself.
    InsideStore,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_round_trip_fits_up_to_twice_the_known_one() {
        let k = KnownPath {
            rate: 1,
            tcp_rate: 0,
            tcp_peak: 0,
            rtt: Duration::from_millis(150),
            udp_payload: 0,
        };
        let ms = Duration::from_millis;
        assert!(k.fits(ms(170)) && !k.fits(ms(211)));
        assert!(k.fits_queued(ms(211)) && k.fits_queued(ms(330)) && k.fits_queued(ms(120)));
        assert!(!k.fits_queued(ms(340)) && !k.fits_queued(ms(119)));
    }
}
