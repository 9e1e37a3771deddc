//! Per-frame protection (P-5, P-7). Each direction of each stream has its own
//! key and a 64-bit frame counter as nonce, so a frame that is replayed,
//! reordered, dropped or altered fails to open.
//!
//! - AES-256-GCM or ChaCha20-Poly1305 (ring): body encrypted, tag appended.
//! - Integrity only (`--no-encrypt`): the body stays clear and AES-256-GCM
//!   authenticates it as associated data (GMAC), still keyed per session.
//!   Callers may cover only a prefix of the body ([`Sealer::seal_prefix`])
//!   when that prefix commits to the rest: a block frame's header carries
//!   the BLAKE3 hash of its data, which the receiver must check anyway, so
//!   authenticating the header protects the data without a second pass
//!   over it (P-7).

use ring::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use thiserror::Error;

pub use wire_tag::TAG_LEN;

mod wire_tag {
    /// Length of the tag appended to every sealed body.
    pub const TAG_LEN: usize = 16;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protection {
    Aes256Gcm,
    ChaCha20Poly1305,
    IntegrityOnly,
}

impl Protection {
    /// The code a request carries for this protection (P-7).
    pub fn wire_code(self) -> u8 {
        match self {
            Protection::Aes256Gcm => wire::PROTECT_AES256GCM,
            Protection::ChaCha20Poly1305 => wire::PROTECT_CHACHA20POLY1305,
            Protection::IntegrityOnly => wire::PROTECT_INTEGRITY_ONLY,
        }
    }

    /// The protection a request's code names; `None` for a code this
    /// version does not know, which must be refused, never taken for a
    /// weaker one (P-39).
    pub fn from_wire(code: u8) -> Option<Protection> {
        match code {
            wire::PROTECT_AES256GCM => Some(Protection::Aes256Gcm),
            wire::PROTECT_CHACHA20POLY1305 => Some(Protection::ChaCha20Poly1305),
            wire::PROTECT_INTEGRITY_ONLY => Some(Protection::IntegrityOnly),
            _ => None,
        }
    }

    /// The fastest encrypting choice for this CPU: AES-GCM where the CPU has
    /// AES instructions, ChaCha20-Poly1305 elsewhere.
    pub fn best_encrypting() -> Protection {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("aes")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
            {
                return Protection::Aes256Gcm;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            if std::arch::is_aarch64_feature_detected!("aes") {
                return Protection::Aes256Gcm;
            }
        }
        Protection::ChaCha20Poly1305
    }

    pub fn encrypts(self) -> bool {
        self != Protection::IntegrityOnly
    }

    pub fn name(self) -> &'static str {
        match self {
            Protection::Aes256Gcm => "aes-256-gcm",
            Protection::ChaCha20Poly1305 => "chacha20-poly1305",
            Protection::IntegrityOnly => "integrity-only (gmac)",
        }
    }

    fn algorithm(self) -> &'static aead::Algorithm {
        match self {
            Protection::ChaCha20Poly1305 => &aead::CHACHA20_POLY1305,
            Protection::Aes256Gcm | Protection::IntegrityOnly => &aead::AES_256_GCM,
        }
    }
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("frame failed authentication (corrupted, replayed or forged)")]
    Forged,
    #[error("frame counter exhausted; the stream must be reopened")]
    Exhausted,
}

struct Keyed {
    key: LessSafeKey,
    protection: Protection,
    counter: u64,
}

impl Keyed {
    fn new(protection: Protection, key: &[u8; 32]) -> Keyed {
        let unbound = UnboundKey::new(protection.algorithm(), key)
            .expect("32-byte keys suit both algorithms");
        Keyed {
            key: LessSafeKey::new(unbound),
            protection,
            counter: 0,
        }
    }

    fn next_nonce(&mut self) -> Result<Nonce, OpenError> {
        let n = self.counter;
        self.counter = n.checked_add(1).ok_or(OpenError::Exhausted)?;
        let mut bytes = [0u8; 12];
        bytes[4..].copy_from_slice(&n.to_le_bytes());
        Ok(Nonce::assume_unique_for_key(bytes))
    }
}

/// Seals the frames one side sends on one stream.
pub struct Sealer(Keyed);

impl Sealer {
    pub fn new(protection: Protection, key: &[u8; 32]) -> Sealer {
        Sealer(Keyed::new(protection, key))
    }

    /// Protects `body` in place (encrypting unless integrity-only) and returns
    /// the tag to send after it.
    pub fn seal(&mut self, body: &mut [u8]) -> [u8; TAG_LEN] {
        let n = body.len();
        self.seal_prefix(body, n)
    }

    /// Like [`Sealer::seal`], but integrity-only mode authenticates only the
    /// first `covered` bytes, which must commit to the rest (P-7).
    pub fn seal_prefix(&mut self, body: &mut [u8], covered: usize) -> [u8; TAG_LEN] {
        // 2^64 frames per stream direction cannot be sent in practice.
        let nonce = self.0.next_nonce().expect("frame counter below 2^64");
        let tag = if self.0.protection.encrypts() {
            self.0
                .key
                .seal_in_place_separate_tag(nonce, Aad::empty(), body)
        } else {
            self.0.key.seal_in_place_separate_tag(
                nonce,
                Aad::from(&body[..covered.min(body.len())]),
                &mut [],
            )
        }
        .expect("sealing cannot fail for in-range lengths");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }
}

/// Opens the frames one side receives on one stream, in order.
pub struct Opener(Keyed);

impl Opener {
    pub fn new(protection: Protection, key: &[u8; 32]) -> Opener {
        Opener(Keyed::new(protection, key))
    }

    /// Checks and (if encrypted) decrypts `body` in place.
    pub fn open(&mut self, body: &mut [u8], tag: &[u8; TAG_LEN]) -> Result<(), OpenError> {
        let n = body.len();
        self.open_prefix(body, n, tag)
    }

    /// Opens a frame sealed with [`Sealer::seal_prefix`]. In integrity-only
    /// mode the bytes past `covered` are NOT authenticated here: the caller
    /// must check them against what the covered prefix commits to.
    pub fn open_prefix(
        &mut self,
        body: &mut [u8],
        covered: usize,
        tag: &[u8; TAG_LEN],
    ) -> Result<(), OpenError> {
        let nonce = self.0.next_nonce()?;
        let tag = aead::Tag::from(*tag);
        let res = if self.0.protection.encrypts() {
            self.0
                .key
                .open_in_place_separate_tag(nonce, Aad::empty(), tag, body, 0..)
                .map(|_| ())
        } else {
            self.0
                .key
                .open_in_place_separate_tag(
                    nonce,
                    Aad::from(&body[..covered.min(body.len())]),
                    tag,
                    &mut [],
                    0..,
                )
                .map(|_| ())
        };
        res.map_err(|_| OpenError::Forged)
    }
}

/// Seals and opens datagrams (P-24): each carries its own sequence number,
/// used as the nonce, so datagrams open in any order. A side must never seal
/// two datagrams with the same sequence number under one key.
pub struct DatagramKey {
    key: LessSafeKey,
    protection: Protection,
}

impl DatagramKey {
    pub fn new(protection: Protection, key: &[u8; 32]) -> DatagramKey {
        let k = Keyed::new(protection, key);
        DatagramKey {
            key: k.key,
            protection,
        }
    }

    fn nonce(seq: u64) -> Nonce {
        let mut bytes = [0u8; 12];
        bytes[4..].copy_from_slice(&seq.to_le_bytes());
        Nonce::assume_unique_for_key(bytes)
    }

    /// Protects `datagram[clear..]` in place and returns the tag to append.
    /// `datagram[..clear]` stays in clear and is authenticated. In
    /// integrity-only mode nothing is encrypted and only
    /// `datagram[..covered]` is authenticated; it must commit to the rest.
    pub fn seal(
        &self,
        seq: u64,
        datagram: &mut [u8],
        clear: usize,
        covered: usize,
    ) -> [u8; TAG_LEN] {
        let nonce = Self::nonce(seq);
        let tag = if self.protection.encrypts() {
            let (aad, body) = datagram.split_at_mut(clear);
            self.key
                .seal_in_place_separate_tag(nonce, Aad::from(&*aad), body)
        } else {
            self.key.seal_in_place_separate_tag(
                nonce,
                Aad::from(&datagram[..covered.min(datagram.len())]),
                &mut [],
            )
        }
        .expect("sealing cannot fail for in-range lengths");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Opens a datagram sealed by [`DatagramKey::seal`] with the same
    /// `clear` and `covered`; `datagram` excludes the tag.
    pub fn open(
        &self,
        seq: u64,
        datagram: &mut [u8],
        clear: usize,
        covered: usize,
        tag: &[u8; TAG_LEN],
    ) -> Result<(), OpenError> {
        let nonce = Self::nonce(seq);
        let tag = aead::Tag::from(*tag);
        let res = if self.protection.encrypts() {
            if clear > datagram.len() {
                return Err(OpenError::Forged);
            }
            let (aad, body) = datagram.split_at_mut(clear);
            self.key
                .open_in_place_separate_tag(nonce, Aad::from(&*aad), tag, body, 0..)
                .map(|_| ())
        } else {
            self.key
                .open_in_place_separate_tag(
                    nonce,
                    Aad::from(&datagram[..covered.min(datagram.len())]),
                    tag,
                    &mut [],
                    0..,
                )
                .map(|_| ())
        };
        res.map_err(|_| OpenError::Forged)
    }

    pub fn protection(&self) -> Protection {
        self.protection
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [Protection; 3] = [
        Protection::Aes256Gcm,
        Protection::ChaCha20Poly1305,
        Protection::IntegrityOnly,
    ];

    #[test]
    fn frames_open_in_order_only() {
        for p in ALL {
            let key = [9u8; 32];
            let mut s = Sealer::new(p, &key);
            let mut o = Opener::new(p, &key);
            let mut a = b"first frame".to_vec();
            let ta = s.seal(&mut a);
            assert_eq!(a != b"first frame", p.encrypts());
            let mut b = b"second".to_vec();
            let tb = s.seal(&mut b);
            // Out of order: the second frame fails under the first nonce.
            assert_eq!(o.open(&mut b.clone(), &tb), Err(OpenError::Forged));
            let mut o = Opener::new(p, &key);
            o.open(&mut a, &ta).unwrap();
            assert_eq!(a, b"first frame");
            o.open(&mut b, &tb).unwrap();
            assert_eq!(b, b"second");
        }
    }

    #[test]
    fn prefix_cover_in_integrity_mode_only() {
        let key = [4u8; 32];
        for p in ALL {
            let mut frame = b"HEADER+data".to_vec();
            let tag = Sealer::new(p, &key).seal_prefix(&mut frame, 6);
            let last = frame.len() - 1;
            frame[last] ^= 1;
            let res = Opener::new(p, &key).open_prefix(&mut frame, 6, &tag);
            // Encrypting modes cover everything; integrity-only leaves the
            // tail to the caller's hash check.
            assert_eq!(res.is_ok(), !p.encrypts(), "{p:?}");
            let mut frame = b"HEADER+data".to_vec();
            let tag = Sealer::new(p, &key).seal_prefix(&mut frame, 6);
            frame[0] ^= 1;
            assert_eq!(
                Opener::new(p, &key).open_prefix(&mut frame, 6, &tag),
                Err(OpenError::Forged)
            );
        }
    }

    #[test]
    fn datagrams_open_in_any_order_but_not_under_another_seq() {
        for p in ALL {
            let k = DatagramKey::new(p, &[3u8; 32]);
            let mut a = b"PREFIXhdr-and-data".to_vec();
            let ta = k.seal(7, &mut a, 6, 9);
            let mut b = b"PREFIXother".to_vec();
            let tb = k.seal(8, &mut b, 6, 11);
            k.open(8, &mut b, 6, 11, &tb).unwrap();
            assert_eq!(b, b"PREFIXother");
            assert_eq!(k.open(9, &mut a.clone(), 6, 9, &ta), Err(OpenError::Forged));
            let mut c = a.clone();
            c[7] ^= 1;
            assert_eq!(k.open(7, &mut c, 6, 9, &ta), Err(OpenError::Forged));
            k.open(7, &mut a, 6, 9, &ta).unwrap();
            assert_eq!(a, b"PREFIXhdr-and-data");
        }
    }

    proptest! {
        #[test]
        fn any_flipped_bit_is_caught(body in proptest::collection::vec(any::<u8>(), 1..500), bit: usize, p in 0usize..3) {
            let p = ALL[p];
            let key = [1u8; 32];
            let mut frame = body.clone();
            let tag = Sealer::new(p, &key).seal(&mut frame);
            let i = bit % (frame.len() * 8);
            frame[i / 8] ^= 1 << (i % 8);
            prop_assert_eq!(Opener::new(p, &key).open(&mut frame, &tag), Err(OpenError::Forged));
        }
    }
}
