//! The jobs on disk (P-45 J-2): one directory a job, named by its id,
//! holding `job.json` (its record, written whole before the directory
//! gets its name) and `events.jsonl` (one event a line, each appended
//! with one write and synced before the driver acts on it). A crash at
//! any point leaves each job as its last whole line says: a torn last
//! line is cut off when the journal is read back, a directory that never
//! got its name is removed. Everything is private to the daemon's user
//! (the record holds a grant's secret key).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::event::Event;
use crate::spec::{Id, Record, MAX_SPEC_BYTES};

/// Most bytes of one job's events read back (a job that retried for a
/// year at the longest backoff writes under 1 MiB).
pub const MAX_EVENTS_BYTES: u64 = 64 << 20;

const RECORD: &str = "job.json";
const EVENTS: &str = "events.jsonl";

/// The directory that holds a daemon's jobs.
#[derive(Debug, Clone)]
pub struct Journal {
    dir: PathBuf,
}

/// A job read back, and what was wrong with the directory, if anything.
pub struct Loaded {
    pub jobs: Vec<(Record, Vec<Event>)>,
    /// One line for a person per thing skipped or repaired.
    pub notes: Vec<String>,
}

impl Journal {
    /// Opens (creating, private) the jobs directory.
    pub fn open(dir: &Path) -> std::io::Result<Journal> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        Ok(Journal {
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes a new job's record: whole in a hidden directory, synced,
    /// then renamed to the job's id, and the parent synced.
    pub fn create(&self, record: &Record) -> std::io::Result<()> {
        let id = record.id.hex();
        let tmp = self.dir.join(format!(".{id}.new"));
        let _ = fs::remove_dir_all(&tmp);
        fs::DirBuilder::new().mode(0o700).create(&tmp)?;
        let mut f = private(&tmp.join(RECORD), false)?;
        f.write_all(&serde_json::to_vec_pretty(record).expect("a record serializes"))?;
        f.sync_all()?;
        File::open(&tmp)?.sync_all()?;
        fs::rename(&tmp, self.dir.join(&id))?;
        File::open(&self.dir)?.sync_all()
    }

    /// Appends one event to a job's journal, synced.
    pub fn append(&self, id: &Id, event: &Event) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(event).expect("an event serializes");
        line.push(b'\n');
        let mut f = private(&self.dir.join(id.hex()).join(EVENTS), true)?;
        f.write_all(&line)?;
        f.sync_data()
    }

    /// Every job in the directory, with its events, oldest first.
    pub fn load(&self) -> std::io::Result<Loaded> {
        let mut jobs = Vec::new();
        let mut notes = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".new") {
                // Cut off before it got its name: it was never submitted.
                let _ = fs::remove_dir_all(entry.path());
                continue;
            }
            let Some(id) = Id::parse(&name) else {
                continue;
            };
            match self.load_one(&id) {
                Ok((record, events, note)) => {
                    notes.extend(note);
                    jobs.push((record, events));
                }
                Err(e) => notes.push(format!(
                    "job {id} in {} could not be read, and is skipped: {e}",
                    self.dir.display()
                )),
            }
        }
        jobs.sort_by_key(|(r, _)| (r.created_ms, r.id));
        Ok(Loaded { jobs, notes })
    }

    fn load_one(&self, id: &Id) -> Result<(Record, Vec<Event>, Option<String>), String> {
        let dir = self.dir.join(id.hex());
        let bytes = read_bounded(&dir.join(RECORD), 2 * MAX_SPEC_BYTES as u64)?;
        let record: Record =
            serde_json::from_slice(&bytes).map_err(|e| format!("its record: {e}"))?;
        if record.id != *id {
            return Err("its record names another job".into());
        }
        let path = dir.join(EVENTS);
        let bytes = match read_bounded(&path, MAX_EVENTS_BYTES) {
            Ok(b) => b,
            Err(_) if !path.exists() => Vec::new(),
            Err(e) => return Err(e),
        };
        let (events, good) = whole_events(&bytes);
        let mut note = None;
        if good < bytes.len() {
            // A torn or unreadable tail: cut it, so the next event starts
            // a line of its own.
            let f = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| e.to_string())?;
            f.set_len(good as u64).map_err(|e| e.to_string())?;
            f.sync_all().map_err(|e| e.to_string())?;
            note = Some(format!(
                "job {id}: the last {} byte(s) of its journal were cut off (a crash while it was written); it goes on from its last whole event",
                bytes.len() - good
            ));
        }
        Ok((record, events, note))
    }
}

/// The events of whole lines from the start, and the length they take;
/// reading stops at the first line that is torn or does not parse.
pub fn whole_events(bytes: &[u8]) -> (Vec<Event>, usize) {
    let mut events = Vec::new();
    let mut good = 0;
    while let Some(n) = bytes[good..].iter().position(|&b| b == b'\n') {
        match serde_json::from_slice::<Event>(&bytes[good..good + n]) {
            Ok(e) => events.push(e),
            Err(_) => break,
        }
        good += n + 1;
    }
    (events, good)
}

fn private(path: &Path, append: bool) -> std::io::Result<File> {
    OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut b = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut b)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if b.len() as u64 > max {
        return Err(format!("{} is over {max} bytes", path.display()));
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::Queue;
    use crate::spec::tests::spec;

    fn record() -> Record {
        Record {
            id: Id::random(),
            owner: "ee".repeat(32),
            owner_name: "alice".into(),
            created_ms: 1_000,
            parent: None,
            not_before_ms: None,
            spec: spec(),
        }
    }

    fn events() -> Vec<Event> {
        vec![
            Event::Submitted { at: 1_000 },
            Event::Started {
                at: 1_001,
                attempt: 1,
            },
            Event::Fault {
                at: 2_000,
                attempt: 1,
                code: 10,
                error: "connection lost \"quoted\"\nnewline".into(),
                bytes: 5,
                wire: 6,
                retry_at: Some(4_000),
            },
            Event::Started {
                at: 4_000,
                attempt: 2,
            },
            Event::Succeeded {
                at: 9_000,
                attempt: 2,
                files: 3,
                bytes: 10,
                sent: 5,
                wire: 7,
                secs: 5.0,
                rate_bps: 16,
            },
        ]
    }

    #[test]
    fn a_job_is_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("jobs")).unwrap();
        let r = record();
        j.create(&r).unwrap();
        for e in events() {
            j.append(&r.id, &e).unwrap();
        }
        let loaded = j.load().unwrap();
        assert_eq!(loaded.jobs, vec![(r, events())]);
        assert!(loaded.notes.is_empty());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(j.dir()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "the jobs directory is private");
    }

    /// The fault layer: the journal cut at every byte (a crash at any
    /// point of any write) loads as a prefix of its events, says so, and
    /// takes the next event on a line of its own; the queue then goes on
    /// from that prefix (a job cut while running is retried).
    #[test]
    fn a_crash_at_any_byte_leaves_a_prefix_that_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(&dir.path().join("jobs")).unwrap();
        let r = record();
        j.create(&r).unwrap();
        for e in events() {
            j.append(&r.id, &e).unwrap();
        }
        let path = j.dir().join(r.id.hex()).join(EVENTS);
        let whole = fs::read(&path).unwrap();
        for cut in 0..=whole.len() {
            fs::write(&path, &whole[..cut]).unwrap();
            let loaded = j.load().unwrap();
            let (_, got) = &loaded.jobs[0];
            assert_eq!(got[..], events()[..got.len()], "cut at {cut}");
            let lines = whole[..cut].iter().filter(|&&b| b == b'\n').count();
            assert_eq!(got.len(), lines, "cut at {cut}");
            assert_eq!(loaded.notes.is_empty(), cut == 0 || whole[cut - 1] == b'\n');
            let mut q = Queue::new(4);
            q.load(r.clone(), got.clone(), 10_000);
            j.append(&r.id, &Event::Paused { at: 10_001 }).unwrap();
            let again = j.load().unwrap();
            assert_eq!(again.jobs[0].1.len(), got.len() + 1, "cut at {cut}");
        }
        // A record cut off before its directory got its name was never
        // submitted: it is removed.
        let torn = j.dir().join(format!(".{}.new", Id::random().hex()));
        fs::create_dir(&torn).unwrap();
        fs::write(torn.join(RECORD), b"{\"id\":").unwrap();
        let loaded = j.load().unwrap();
        assert_eq!(loaded.jobs.len(), 1);
        assert!(!torn.exists());
    }
}
