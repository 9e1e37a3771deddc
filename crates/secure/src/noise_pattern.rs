//! The Noise protocol name, apart so `keys` can use it without importing `handshake`.

/// The Noise protocol name haul uses.
pub const NOISE_PATTERN: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
