//! Who the peer is and how frames are protected.
//!
//! - [`keys`]: a host's static X25519 keypair and its text form.
//! - [`trust`]: the server's authorized-keys file and the client's pinned
//!   servers (trust on first use, like ssh's `known_hosts`).
//! - [`handshake`]: Noise XX (via `snow`) as a sans-IO state machine; it
//!   yields [`SessionKeys`] from which every stream's keys derive (P-3).
//! - [`pinned`]: Noise IK for a server whose key is pinned, one round trip
//!   with the request in its first message (P-48).
//! - [`ssh_start`]: Noise NN carried in the remote ssh greeting and the
//!   client's answer, for a session started over ssh (P-27).
//! - [`seal`]: per-direction AEAD with counter nonces for every frame (P-5),
//!   or authentication without encryption under `--no-encrypt` (P-7).

pub mod handshake;
pub mod keys;
mod noise_pattern;
pub mod pinned;
pub mod seal;
pub mod ssh_start;
pub mod trust;

pub use handshake::{ClientHandshake, Direction, HandshakeError, ServerHandshake, SessionKeys};
pub use keys::{KeyError, Keypair, PublicKey};
pub use pinned::{PinnedClient, PinnedOpened, PinnedServer};
pub use seal::{DatagramKey, OpenError, Opener, Protection, Sealer};
pub use ssh_start::{ssh_start_answer, SshStartServer};
pub use trust::{AuthorizedKeys, HostKeyStatus, KnownHosts, LoadedKeys};
