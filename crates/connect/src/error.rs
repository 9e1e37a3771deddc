//! The error every driver path returns, [`wire::TransferError`] (beside
//! the codes it carries), named here too for the crates above.

pub use wire::TransferError;
