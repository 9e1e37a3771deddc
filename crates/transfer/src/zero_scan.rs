//! A pushing client's head start: while the connection is set up (a TCP
//! connect, the handshake and the request, two round trips or more; more
//! where ssh starts the server), it already reads its files in manifest
//! order and notes which blocks are all zeros (P-29). The session then
//! announces those blocks in its first control messages without reading
//! them again, instead of reading them only once the server accepted:
//! 256 MiB of zeros took about 0.1 s after the accept at 150 ms. Other
//! blocks are read again later, from the page cache the scan warmed.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use store::{BlockSource, Sources, Walked};
use wire::EntryKind;

/// Most bytes one scan reads: a head start, not a second pass.
pub const MAX_SCAN: u64 = 1 << 30;

/// Blocks found all zeros: (entry id, offset, length).
pub type ZeroBlocks = HashSet<(u32, u64, u32)>;

/// A scan running on its own thread until [`ZeroScan::finish`].
pub struct ZeroScan {
    stop: Arc<AtomicBool>,
    /// The scan read a block that is not all zeros (or could not read one).
    data: Arc<AtomicBool>,
    thread: Option<JoinHandle<ZeroBlocks>>,
    /// What a scan that ran to its end found, once taken.
    done: Option<ZeroBlocks>,
}

impl ZeroScan {
    /// Starts reading the files of `walked` of at least one whole block,
    /// block by block as the session will cut them.
    pub fn start(walked: &Walked, block_size: u32) -> ZeroScan {
        let files: Vec<(u32, u64)> = walked
            .entries
            .iter()
            .filter_map(|e| match e.kind {
                EntryKind::File { size, .. } if size >= block_size as u64 => Some((e.id, size)),
                _ => None,
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let data = Arc::new(AtomicBool::new(false));
        if files.is_empty() {
            return ZeroScan {
                stop,
                data,
                thread: None,
                done: Some(ZeroBlocks::new()),
            };
        }
        let sources = Sources::new(walked.paths.clone()).stamped(&walked.entries, &walked.inodes);
        let (flag, seen) = (stop.clone(), data.clone());
        let thread = std::thread::Builder::new()
            .name("zero-scan".into())
            .spawn(move || scan(&sources, &files, block_size, &flag, &seen))
            .ok();
        ZeroScan {
            stop,
            data,
            thread,
            done: None,
        }
    }

    /// A scan that reads nothing (a sync, whose files may all be skipped).
    pub fn none() -> ZeroScan {
        ZeroScan {
            stop: Arc::new(AtomicBool::new(false)),
            data: Arc::new(AtomicBool::new(true)),
            thread: None,
            done: None,
        }
    }

    /// Whether the scan read every file of `walked` and found nothing to
    /// send: every file empty or all zeros (P-29, a push with nothing to
    /// send). While it has found only zeros it is waited for, at most
    /// `wait`; once it read any other byte, the answer is no at once.
    pub fn only_zeros(&mut self, walked: &Walked, block_size: u32, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        while self.done.is_none() {
            if self.data.load(Ordering::Relaxed) {
                return false;
            }
            if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
                self.done = self.thread.take().and_then(|t| t.join().ok());
                break;
            }
            if self.thread.is_none() || Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let Some(found) = &self.done else {
            return false;
        };
        walked.entries.iter().all(|e| match e.kind {
            EntryKind::File { size: 0, .. } => true,
            EntryKind::File { size, .. } => (0..size)
                .step_by(block_size as usize)
                .all(|at| found.contains(&(e.id, at, (size - at).min(block_size as u64) as u32))),
            _ => true,
        })
    }

    /// Stops the scan and returns what it found so far.
    pub fn finish(mut self) -> ZeroBlocks {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(found) = self.done.take() {
            return found;
        }
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for ZeroScan {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn scan(
    sources: &dyn BlockSource,
    files: &[(u32, u64)],
    block_size: u32,
    stop: &AtomicBool,
    data: &AtomicBool,
) -> ZeroBlocks {
    let mut found = ZeroBlocks::new();
    let mut buf = Vec::new();
    let mut read = 0u64;
    for &(id, size) in files {
        for offset in (0..size).step_by(block_size as usize) {
            if stop.load(Ordering::Relaxed) || read >= MAX_SCAN {
                return found;
            }
            let len = (size - offset).min(block_size as u64) as u32;
            buf.resize(len as usize, 0);
            // A file that cannot be read, or changed, is the session's to
            // report when it reads it; the scan moves on.
            if sources.read_block(id, offset, &mut buf).is_err() {
                data.store(true, Ordering::Relaxed);
                break;
            }
            read += len as u64;
            if codec::is_zero(&buf) {
                found.insert((id, offset, len));
            } else {
                data.store(true, Ordering::Relaxed);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn finds_the_zero_blocks_of_whole_block_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let bs = 64 * 1024u32;
        let big = dir.path().join("big");
        let mut f = std::fs::File::create(&big).unwrap();
        // Blocks: zeros, data, zeros, and a short tail of zeros.
        f.write_all(&vec![0u8; bs as usize]).unwrap();
        f.write_all(&vec![7u8; bs as usize]).unwrap();
        f.write_all(&vec![0u8; bs as usize + 100]).unwrap();
        drop(f);
        let small = dir.path().join("small");
        std::fs::write(&small, vec![0u8; 1000]).unwrap();
        let walked = store::walk(&[big, small], false).unwrap();
        let id = |name: &[u8]| walked.entries.iter().find(|e| e.path == name).unwrap().id;
        let (b, _) = (id(b"big"), id(b"small"));
        let found = ZeroScan::start(&walked, bs).finish_when_done();
        let want: ZeroBlocks = [(b, 0, bs), (b, 2 * bs as u64, bs), (b, 3 * bs as u64, 100)]
            .into_iter()
            .collect();
        assert_eq!(found, want);
    }

    #[test]
    fn a_finished_scan_stops_and_a_sync_scans_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("zeros");
        std::fs::write(&p, vec![0u8; 1 << 20]).unwrap();
        let walked = store::walk(&[p], false).unwrap();
        assert!(ZeroScan::none().finish().is_empty());
        // Stopped at once, it found at most what it read.
        let found = ZeroScan::start(&walked, 64 * 1024).finish();
        assert!(found.len() <= 16);
    }

    #[test]
    fn only_a_finished_scan_of_nothing_but_zeros_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let bs = 64 * 1024u32;
        let zeros = dir.path().join("zeros");
        std::fs::write(&zeros, vec![0u8; 3 * bs as usize + 5]).unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        let walked = store::walk(&[zeros.clone(), empty], false).unwrap();
        let mut scan = ZeroScan::start(&walked, bs);
        assert!(scan.only_zeros(&walked, bs, Duration::from_secs(10)));
        assert_eq!(scan.finish().len(), 4);
        // One byte of data, or a file too small to scan, and it does not.
        let mut data = vec![0u8; 3 * bs as usize];
        data[bs as usize + 9] = 1;
        std::fs::write(&zeros, data).unwrap();
        let small = dir.path().join("small");
        std::fs::write(&small, vec![0u8; 100]).unwrap();
        for paths in [vec![zeros.clone()], vec![small]] {
            let walked = store::walk(&paths, false).unwrap();
            let mut scan = ZeroScan::start(&walked, bs);
            assert!(!scan.only_zeros(&walked, bs, Duration::from_secs(10)));
        }
        assert!(!ZeroScan::none().only_zeros(&walked, bs, Duration::from_secs(1)));
    }

    impl ZeroScan {
        /// Waits for the whole scan instead of stopping it.
        fn finish_when_done(mut self) -> ZeroBlocks {
            self.thread.take().unwrap().join().unwrap()
        }
    }
}
