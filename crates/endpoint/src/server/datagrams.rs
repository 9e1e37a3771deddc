//! A session's UDP data channel on the server (P-23): its socket, opened
//! in the handshake or once the client is authenticated (P-43), and the
//! wait for the client's choice of transport while set-up is answered.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use connect::datagram::{self, setup, UdpLink};
use connect::error::TransferError;
use connect::handshake;
use connect::join::{DataPlan, Joined};
use connect::progress::Progress;
use connect::sizing::{size_udp_buffers, udp_buffer};
use secure::Protection;
use wire::{ErrorCode, Msg, Request};

use super::gather::gather;
use super::{open_data_socket, rate_of};

/// How long the server waits for the client's hello and choice of transport.
const UDP_SETUP_TIMEOUT: Duration = Duration::from_secs(30);

impl super::Server {
    /// A UDP socket for a session's data channel, on the local address of
    /// its control connection, inside `--data-ports` if given (P-23).
    pub(super) fn open_udp(&self, local: std::io::Result<SocketAddr>) -> Option<udp::UdpChannel> {
        open_data_socket(local.map(|a| a.ip()), self.cfg.data_ports)
    }

    /// After a UDP request: answer the client's hello and probes (if a UDP
    /// socket could be opened) until it says, on the control connection,
    /// which transport to use (P-23).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn udp_or_streams(
        &self,
        channel: Option<udp::UdpChannel>,
        est: &mut handshake::Established,
        accepted_at: Instant,
        protection: Protection,
        ctrl_r: &mut connect::framed::FrameReader,
        joined: &mpsc::Receiver<Joined>,
        streams: u16,
        req: &Request,
        progress: &Arc<Progress>,
    ) -> Result<DataPlan, TransferError> {
        let (send_key, recv_key) = datagram::keys(&est.keys, protection, false);
        let stop = std::sync::atomic::AtomicBool::new(false);
        let session = est.keys.session_id();
        // The client's set-up may take tens of round trips on a slow path.
        let patience = UDP_SETUP_TIMEOUT.max(est.rtt * 60);
        let (answered, choice) = std::thread::scope(|scope| {
            let responder = channel
                .map(|c| scope.spawn(|| setup::serve(c, session, &send_key, &recv_key, &stop)));
            ctrl_r.get_ref().set_read_timeout(Some(patience)).ok();
            let choice = ctrl_r.read_msg();
            ctrl_r.get_ref().set_read_timeout(None).ok();
            stop.store(true, Ordering::Release);
            let answered = responder.map(|r| r.join().expect("responder does not panic"));
            (answered, choice)
        });
        // A session keyed over ssh had no handshake to time: the client's
        // choice answers the acceptance one round trip later.
        if est.rtt.is_zero() {
            est.rtt = accepted_at.elapsed();
        }
        match choice {
            Ok(Some(Msg::UseTransport { udp_payload: 0, .. })) => {
                tracing::info!("client could not use UDP; falling back to TCP streams");
                gather(joined, streams).map(DataPlan::Tcp)
            }
            Ok(Some(Msg::UseTransport {
                udp_payload,
                path_rate,
            })) => {
                let Some((channel, backlog)) = answered.filter(|(c, _)| c.peer().is_some()) else {
                    return Err(TransferError::new(
                        ErrorCode::Protocol,
                        "client chose UDP but no valid hello arrived",
                    ));
                };
                if (udp_payload as usize) < wire::datagram::MIN_PAYLOAD as usize
                    || udp_payload as usize > udp::MAX_PAYLOAD
                {
                    return Err(TransferError::new(
                        ErrorCode::Protocol,
                        format!("client chose an impossible datagram size {udp_payload}"),
                    ));
                }
                let want = udp_buffer(est.rtt, rate_of(req));
                size_udp_buffers(&channel, want, &self.cfg.tuning, progress);
                Ok(DataPlan::Udp(Box::new(UdpLink {
                    channel,
                    send_key,
                    recv_key,
                    payload: udp_payload as usize,
                    rtt: est.rtt,
                    // The client's word (S-7): it moves only startup, and
                    // never past `--rate` or the key's `rate=`.
                    path_rate: (path_rate > 0).then_some(path_rate),
                    workers: datagram::workers(),
                    backlog,
                    silence: self.cfg.tuning.timeout,
                })))
            }
            Ok(Some(Msg::Error { code, message })) => Err(TransferError::new(code, message)),
            Ok(_) => Err(TransferError::new(
                ErrorCode::Protocol,
                "client sent something else while choosing the transport",
            )),
            Err(e) => Err(e.into_transfer("waiting for the client's choice of transport")),
        }
    }
}
