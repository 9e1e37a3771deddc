//! `haul tunnel` as the tests start it, and a service to tunnel to.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::{Env, HAUL};

/// A test service: greets every connection with "hello\n", then echoes
/// (first byte 'E') or swallows everything and answers the byte count
/// at end of file (first byte 'S').
pub fn service() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().map_while(Result::ok) {
            std::thread::spawn(move || serve_one(s));
        }
    });
    port
}

fn serve_one(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    if s.write_all(b"hello\n").is_err() {
        return;
    }
    let mut mode = [0u8];
    if s.read_exact(&mut mode).is_err() {
        return;
    }
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) if mode[0] == b'E' => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            Ok(n) => total += n as u64,
        }
    }
    if mode[0] == b'S' {
        let _ = s.write_all(total.to_string().as_bytes());
    }
}

/// A running `haul tunnel`, killed when dropped.
pub struct Tunnel {
    pub child: Child,
    pub port: u16,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `haul tunnel --listen 127.0.0.1:0 ARGS` and waits for its banner.
pub fn tunnel(env: &Env, args: &[&str]) -> Result<Tunnel, String> {
    let mut child = Command::new(HAUL)
        .args(["tunnel", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("HAUL_HOME", &env.home)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start haul tunnel");
    let stderr = child.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (tx, rx) = mpsc::channel();
    let log2 = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("haul: tunnel 127.0.0.1:") {
                let port = rest.split(' ').next().and_then(|p| p.parse::<u16>().ok());
                let _ = tx.send(port);
            }
            log2.lock().unwrap().push_str(&line);
            log2.lock().unwrap().push('\n');
        }
        let _ = tx.send(None);
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(port)) => Ok(Tunnel { child, port, log }),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            let log = log.lock().unwrap().clone();
            Err(log)
        }
    }
}

pub fn connect(port: u16, mode: u8) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_nodelay(true).unwrap();
    let mut hello = [0u8; 6];
    s.read_exact(&mut hello).expect("the service's greeting");
    assert_eq!(&hello, b"hello\n");
    s.write_all(&[mode]).unwrap();
    s
}

/// Sends `data` and reads the echo concurrently; returns the echo.
pub fn echo_through(port: u16, data: Vec<u8>) -> Vec<u8> {
    let s = connect(port, b'E');
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        for c in data.chunks(100_000) {
            w.write_all(c).unwrap();
        }
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut got = Vec::new();
    (&s).read_to_end(&mut got)
        .expect("the echo, then end of file");
    writer.join().unwrap();
    got
}
