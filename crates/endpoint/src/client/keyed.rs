//! A session keyed in the ssh greetings (P-27): its control connection
//! goes through the ssh channel's relay and joins with those keys, so the
//! request leaves the moment the remote greeting arrives, with no
//! connection to make and no handshake to wait for. The data goes directly
//! to the remote side if the hosts reach each other (tried while the
//! request travels), else through the relay too.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use wire::{ErrorCode, Msg};

use connect::error::TransferError;
use connect::join::client_keyed_control;
use connect::progress::{Mark, Progress};

use super::config::{choose_transport, ClientConfig, Transport, AUTO_UDP_RTT};
use super::connected::{Connected, Control, HelloSent};
use super::route::SshRoute;

impl Connected {
    /// Opens the control connection of a keyed session over `relayed` (a
    /// connection to the relay's loopback address). The round trip is not
    /// known yet: the last transfer's to this host stands in, else the
    /// round trip from which the UDP channel is used, until the answer to
    /// the request measures it.
    pub fn keyed(
        cfg: ClientConfig,
        relayed: TcpStream,
        keys: secure::SessionKeys,
        udp_port: u16,
        route: SshRoute,
        started: Instant,
    ) -> Result<Connected, TransferError> {
        let progress = Arc::new(Progress::default());
        let addr = route.relay;
        let control = client_keyed_control(relayed, &keys, &progress)?;
        progress.timeline.mark(Mark::Connected);
        progress.timeline.mark(Mark::Authenticated);
        let rtt = cfg.known_path.map_or(AUTO_UDP_RTT, |k| k.rtt);
        Ok(Connected {
            cfg,
            addr,
            ctrl: Some(Control {
                r: control.reader,
                w: control.writer,
                keys,
            }),
            pending: None,
            early: false,
            rtt,
            udp_port,
            started,
            progress,
            echo_span: None,
            echo: None,
            route: Some(route),
            server_key: None,
        })
    }

    /// Where data connections and the UDP channel go before the route is
    /// settled: directly, as the remote greeting named.
    pub(super) fn data_addr(&self) -> SocketAddr {
        match &self.route {
            Some(r) if r.relayed.load(Ordering::Relaxed) => r.relay,
            Some(r) => r.direct,
            None => self.addr,
        }
    }

    /// Once the request is answered (and the round trip known): settles
    /// where the data goes. Returns the hello to go on with, if the UDP
    /// channel is still to be set up; with none, the data takes TCP
    /// streams, directly or through the relay.
    pub(super) fn settle_route(
        &mut self,
        hello: Option<Result<HelloSent, String>>,
    ) -> Result<Option<Result<HelloSent, String>>, TransferError> {
        let Some(route) = self.route.as_mut() else {
            return Ok(hello);
        };
        let aimed = route.direct;
        match route.settle() {
            Err(why) => {
                let host = &self.cfg.host;
                if hello.is_some() && self.cfg.transport == Transport::Udp {
                    let message = format!(
                        "--transport udp needs a direct path to {host} ({why}), and the ssh channel carries only TCP; drop --transport udp to let the data go through ssh"
                    );
                    let _ = self.ctrl()?.w.send_msg(&Msg::Error {
                        code: ErrorCode::Connect,
                        message: message.clone(),
                    });
                    return Err(TransferError::new(ErrorCode::Connect, message));
                }
                if let Some(f) = &self.cfg.notice {
                    f(&format!(
                        "no direct connection to {host} ({why}); carrying the data through the ssh channel instead (at ssh's speed; for full speed, open a port range in the firewall and name it with --remote-ports, or run `haul serve` there)"
                    ));
                }
                if hello.is_some() {
                    self.ctrl()?
                        .w
                        .send_msg(&Msg::UseTransport {
                            udp_payload: 0,
                            path_rate: 0,
                        })
                        .map_err(|e| TransferError::lost("choosing TCP streams", &e))?;
                }
                Ok(None)
            }
            Ok(reached) => {
                let Some(hello) = hello else { return Ok(None) };
                // Asked for before the round trip was known: on a short
                // path automatic transport takes TCP streams after all.
                if self.cfg.transport == Transport::Auto
                    && self.cfg.advice.is_none()
                    && choose_transport(Transport::Auto, self.rtt) == Transport::Tcp
                {
                    self.ctrl()?
                        .w
                        .send_msg(&Msg::UseTransport {
                            udp_payload: 0,
                            path_rate: 0,
                        })
                        .map_err(|e| TransferError::lost("choosing TCP streams", &e))?;
                    return Ok(None);
                }
                // The hello went to the greeting's address; another one
                // answered.
                if reached.ip() != aimed.ip() {
                    return Ok(Some(self.udp_hello()));
                }
                Ok(Some(hello))
            }
        }
    }
}
