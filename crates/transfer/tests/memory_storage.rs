//! The engine moves a tree between a source and a sink that it knows only
//! through `store::BlockSource` and `store::BlockSink` (issue 25). Here
//! both are kept in memory: a new storage backend (an object store, a
//! shard filter) is one implementation of those traits, and the engine,
//! its stages and the sessions run unchanged, over real TCP connections
//! on loopback with sealed frames.

use std::collections::{BTreeMap, HashMap};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use connect::framed::{FrameReader, FrameWriter};
use connect::Progress;
use secure::{Opener, Protection, Sealer};
use session::{ReceiverSession, SenderSession};
use store::{
    BlockSink, BlockSource, Capabilities, DirTimes, Held, Stamp, StoreError, StoreErrorKind,
    Verified,
};
use transfer::{run_receiver, run_sender, ReceiveOptions, RecvPath, SendPath, Sending};
use wire::{Entry, EntryKind};

const BLOCK: u32 = 64 << 10;

/// Sources held in memory, by manifest id.
struct MemorySource {
    files: HashMap<u32, Arc<Vec<u8>>>,
}

struct MemoryHeld(Arc<Vec<u8>>);

impl Held for MemoryHeld {
    fn size(&self) -> std::io::Result<u64> {
        Ok(self.0.len() as u64)
    }

    fn stat(&self) -> std::io::Result<(u64, i64, u32)> {
        Ok((self.0.len() as u64, 0, 0))
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let at = offset as usize;
        let bytes = self
            .0
            .get(at..at + buf.len())
            .ok_or(std::io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }
}

fn missing(what: &str) -> StoreError {
    StoreError::new(StoreErrorKind::Other, what.to_string())
}

impl BlockSource for MemorySource {
    fn name(&self, id: u32) -> String {
        format!("memory object {id}")
    }

    fn read_block(&self, id: u32, offset: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        let f = self
            .files
            .get(&id)
            .ok_or_else(|| missing("no such object"))?;
        MemoryHeld(f.clone())
            .read_exact_at(buf, offset)
            .map_err(|_| missing("a block past the object's end"))
    }

    fn known_zero(&self, _: u32, _: u64, _: u32) -> bool {
        false
    }

    fn check_unchanged(&self, _: u32) -> Result<(), StoreError> {
        Ok(())
    }

    fn open(&self, id: u32) -> Result<Arc<dyn Held>, StoreError> {
        let f = self
            .files
            .get(&id)
            .ok_or_else(|| missing("no such object"))?;
        Ok(Arc::new(MemoryHeld(f.clone())))
    }
}

/// A file being received: its manifest path and its bytes so far.
type Receiving = (Vec<u8>, Vec<u8>);

/// A sink that keeps what it is given: files being received by id, and
/// what was placed by path.
#[derive(Default)]
struct MemorySink {
    open: Mutex<HashMap<u32, Receiving>>,
    placed: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    dirs: Mutex<Vec<Vec<u8>>>,
    recorded: Mutex<u64>,
}

impl MemorySink {
    fn with<T>(&self, id: u32, f: impl FnOnce(&mut Vec<u8>) -> Option<T>) -> Result<T, StoreError> {
        let mut open = self.open.lock().unwrap();
        let (_, data) = open.get_mut(&id).ok_or_else(|| missing("not open"))?;
        f(data).ok_or_else(|| missing("a block past the file's end"))
    }
}

/// The core, and the two capabilities it has: zero holes and a record of
/// verified blocks (counted). No links, no resume, no `--delete`: the
/// storage interface's defaults say so.
impl BlockSink for MemorySink {
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    fn make_dir(&self, rel: &[u8], _: u32) -> Result<(), StoreError> {
        self.dirs.lock().unwrap().push(rel.to_vec());
        Ok(())
    }

    fn open_file(&self, id: u32, rel: &[u8], stamp: &Stamp) -> Result<(), StoreError> {
        let data = vec![0xAA; stamp.size as usize];
        self.open.lock().unwrap().insert(id, (rel.to_vec(), data));
        Ok(())
    }

    fn write_block(&self, id: u32, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        self.with(id, |f| {
            let at = offset as usize;
            f.get_mut(at..at + data.len())?.copy_from_slice(data);
            Some(())
        })
    }

    fn finalize(&self, batch: &[Verified]) -> Result<(), StoreError> {
        for v in batch {
            let (rel, data) = self
                .open
                .lock()
                .unwrap()
                .remove(&v.id)
                .ok_or_else(|| missing("finalized twice"))?;
            self.placed.lock().unwrap().insert(rel, data);
        }
        Ok(())
    }

    fn finish(&self, _: &[DirTimes]) -> Result<(), StoreError> {
        Ok(())
    }

    fn abort(&self) {
        self.open.lock().unwrap().clear();
    }

    fn write_zero(&self, id: u32, offset: u64, len: u32) -> Result<(), StoreError> {
        self.with(id, |f| {
            let at = offset as usize;
            f.get_mut(at..at + len as usize)?.fill(0);
            Some(())
        })
    }

    fn record(&self, _: u32, _: u32, _: &[u8; 32]) {
        *self.recorded.lock().unwrap() += 1;
    }

    fn destination_exists(&self) -> bool {
        !self.placed.lock().unwrap().is_empty()
    }
}

/// A connected pair of loopback sockets.
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// Sealed frames both ways over one connection: `a` seals with `k1`,
/// `b` with `k2`.
fn framed(
    k1: u8,
    k2: u8,
    progress: &Arc<Progress>,
) -> ((FrameReader, FrameWriter), (FrameReader, FrameWriter)) {
    let p = Protection::ChaCha20Poly1305;
    let (a, b) = pair();
    let side = |s: TcpStream, mine: u8, theirs: u8| {
        (
            FrameReader::new(
                s.try_clone().unwrap(),
                Opener::new(p, &[theirs; 32]),
                progress.clone(),
            ),
            FrameWriter::new(s, Sealer::new(p, &[mine; 32]), progress.clone()),
        )
    };
    (side(a, k1, k2), side(b, k2, k1))
}

fn file(id: u32, path: &str, size: usize) -> Entry {
    Entry {
        id,
        path: path.as_bytes().to_vec(),
        kind: EntryKind::File {
            size: size as u64,
            mode: 0o644,
            mtime: 1_700_000_000,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    }
}

fn send_tree(compress: codec::Mode, streams: usize) {
    // A directory; a file of many blocks and a short last one; one of
    // zeros (announced, not sent); text that compresses; small files
    // (bundled when compressing); an empty one.
    let mut contents: Vec<(String, Vec<u8>)> = vec![
        (
            "t/big".into(),
            codec::samples::noise(5 * BLOCK as usize + 12_345, 1),
        ),
        ("t/zeros".into(), vec![0u8; 3 * BLOCK as usize]),
        (
            "t/text".into(),
            b"every block hashed, every file verified\n".repeat(9_000),
        ),
        ("t/empty".into(), Vec::new()),
    ];
    for i in 0..20 {
        contents.push((
            format!("t/s{i:02}"),
            codec::samples::noise(100 + 700 * i, 10 + i as u64),
        ));
    }
    let mut entries = vec![Entry {
        id: 0,
        path: b"t".to_vec(),
        kind: EntryKind::Dir {
            mode: 0o755,
            mtime: 1_700_000_000,
            mtime_nsec: 0,
        },
        target: Vec::new(),
    }];
    let mut files = HashMap::new();
    for (i, (path, data)) in contents.iter().enumerate() {
        let id = i as u32 + 1;
        entries.push(file(id, path, data.len()));
        files.insert(id, Arc::new(data.clone()));
    }
    let source = MemorySource { files };
    let sink = MemorySink::default();

    let (tx_progress, rx_progress) = (Arc::new(Progress::default()), Arc::new(Progress::default()));
    let ((s_ctrl_r, s_ctrl_w), (r_ctrl_r, r_ctrl_w)) = framed(1, 2, &tx_progress);
    let (mut writers, mut readers) = (Vec::new(), Vec::new());
    for i in 0..streams {
        let ((_, w), (r, _)) = framed(10 + i as u8, 50 + i as u8, &tx_progress);
        writers.push(w);
        readers.push(r);
    }
    let sender = SenderSession::new(entries, BLOCK, 64 << 20);
    let receiver = ReceiverSession::new(BLOCK);
    let how = Sending {
        rate: None,
        compress,
        start_rate: None,
        known_rate: None,
        path: None,
        answer: None,
        share: rate::Share::Fair,
    };
    let opts = ReceiveOptions::default();
    let (sent, received) = std::thread::scope(|s| {
        let (source, tx_progress) = (&source, &tx_progress);
        let sending = s.spawn(move || {
            run_sender(
                s_ctrl_r,
                s_ctrl_w,
                SendPath::Tcp(writers),
                sender,
                source,
                how,
                tx_progress,
            )
        });
        let received = run_receiver(
            r_ctrl_r,
            r_ctrl_w,
            RecvPath::Tcp(readers),
            receiver,
            &sink,
            &opts,
            &rx_progress,
        );
        (sending.join().unwrap(), received)
    });
    let summary = received.expect("the receiver finished");
    let report = sent.expect("the sender finished");
    assert_eq!(summary.files, contents.len() as u64);
    assert_eq!(report.summary.files, contents.len() as u64);
    let placed = sink.placed.lock().unwrap();
    for (path, data) in &contents {
        let got = placed
            .get(path.as_bytes())
            .unwrap_or_else(|| panic!("{path} not placed"));
        assert!(got == data, "{path} differs");
    }
    assert_eq!(*sink.dirs.lock().unwrap(), vec![b"t".to_vec()]);
    assert!(sink.open.lock().unwrap().is_empty(), "every file placed");
    // The zeros were announced, not sent, and placed as zeros.
    assert_eq!(Progress::get(&rx_progress.zero_bytes), 3 * BLOCK as u64);
    if compress != codec::Mode::Fixed(codec::Codec::None) {
        let (raw, wire) = (
            Progress::get(&tx_progress.compressed_in),
            Progress::get(&tx_progress.compressed_out),
        );
        assert!(
            wire < raw,
            "the text went compressed: {raw} -> {wire} bytes"
        );
    }
}

#[test]
fn a_tree_moves_between_memory_storage_through_the_engine() {
    send_tree(codec::Mode::Fixed(codec::Codec::None), 2);
}

#[test]
fn compressed_and_bundled_blocks_reach_memory_storage_too() {
    send_tree(codec::Mode::Fixed(codec::Codec::Lz4), 3);
}
