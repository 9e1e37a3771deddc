//! The UDP data channel's transfer loops (P-23 to P-26): the paced sender
//! and the receiver, which move datagrams between the socket and
//! `session::datagram`. Set-up, sealing and opening are `connect::datagram`'s.

pub mod receive;
pub mod send;
