//! The packed-message size limit, apart so `msg` can check it without importing `packed`.

/// Most uncompressed bytes one packed message may hold. A receiver refuses
/// a larger claim before it allocates or decompresses anything.
pub const MAX_PACKED: usize = 1 << 20;
