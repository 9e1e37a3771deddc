//! What an interrupted upload leaves to resume from. The store keeps the
//! parts sent (ListParts says which it has); a journal beside haul's keys
//! (`$HAUL_HOME/s3-uploads`, for every store) says which source version they hold, and
//! each block's hash, so that the sender checks them as it checks a
//! partial file's (P-35) and sends only the rest. One file per key:
//! a header, then a `sending` line as each part goes out (its CRC32C and
//! blocks' hashes) and a `part` line once the store has it and its blocks
//! are verified; a torn last line is ignored. A part the store lists
//! whole that only a `sending` line names is kept too: the store took it
//! before the client could write the answer.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::url::ObjectUrl;

const MAGIC: &str = "haul-s3-upload 1";

/// Which upload, of which source version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub upload_id: String,
    pub url: String,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: u32,
    pub block: u32,
    pub part: u64,
}

/// One part the store has: its number, ETag, CRC32C, and the hashes of
/// its blocks in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartLine {
    pub number: u32,
    /// Empty on a `sending` line: the store has not answered yet.
    pub etag: String,
    pub crc: Option<String>,
    pub hashes: Vec<[u8; 32]>,
    /// Written as the part goes out, before the store has it: a part the
    /// store then lists whole under this number is these bytes (a store
    /// lists only parts it took entire).
    pub sending: bool,
}

/// Where the journal of `url` at `endpoint` lives under `dir`.
pub fn path_for(dir: &Path, endpoint: &str, url: &ObjectUrl) -> PathBuf {
    let id = blake3::hash(format!("{endpoint}\n{url}").as_bytes());
    dir.join(format!("{}.upload", &id.to_hex()[..32]))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn text(s: &str) -> Option<String> {
    String::from_utf8(unhex(s)?).ok()
}

impl Header {
    fn line(&self) -> String {
        format!(
            "{MAGIC} {} {} {} {} {} {} {}\n",
            self.size,
            self.mtime,
            self.mtime_nsec,
            self.block,
            self.part,
            hex(self.upload_id.as_bytes()),
            hex(self.url.as_bytes())
        )
    }

    fn parse(line: &str) -> Option<Header> {
        let rest = line.strip_prefix(MAGIC)?;
        let w: Vec<&str> = rest.split_whitespace().collect();
        let [size, mtime, nsec, block, part, id, url] = w.as_slice() else {
            return None;
        };
        let h = Header {
            size: size.parse().ok()?,
            mtime: mtime.parse().ok()?,
            mtime_nsec: nsec.parse().ok()?,
            block: block.parse().ok()?,
            part: part.parse().ok()?,
            upload_id: text(id)?,
            url: text(url)?,
        };
        // A part is whole blocks, of a size a store takes (none takes
        // parts over 5 GiB).
        let ok = h.block > 0
            && (1..=5u64 << 30).contains(&h.part)
            && h.part.is_multiple_of(u64::from(h.block))
            && !h.upload_id.is_empty();
        ok.then_some(h)
    }

    /// Blocks in part `index` (from 0).
    pub fn blocks_in(&self, index: u64) -> usize {
        let len = self.size.saturating_sub(index * self.part).min(self.part);
        len.div_ceil(u64::from(self.block)) as usize
    }
}

impl PartLine {
    fn line(&self) -> String {
        let hashes: String = self.hashes.iter().map(|h| hex(h)).collect();
        let crc = self
            .crc
            .as_deref()
            .map_or_else(|| "-".to_string(), |c| hex(c.as_bytes()));
        match self.sending {
            true => format!("sending {} {crc} {hashes}\n", self.number),
            false => format!(
                "part {} {} {crc} {hashes}\n",
                self.number,
                hex(self.etag.as_bytes()),
            ),
        }
    }

    fn parse(line: &str, header: &Header) -> Option<PartLine> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let (sending, number, etag, crc, hashes) = match w.as_slice() {
            ["part", number, etag, crc, hashes] => (false, number, *etag, crc, hashes),
            ["sending", number, crc, hashes] => (true, number, "", crc, hashes),
            _ => return None,
        };
        let number: u32 = number.parse().ok()?;
        let index = u64::from(number).checked_sub(1)?;
        if index >= header.size.div_ceil(header.part).max(1) {
            return None;
        }
        let raw = unhex(hashes)?;
        if raw.len() != header.blocks_in(index) * 32 {
            return None;
        }
        Some(PartLine {
            sending,
            number,
            etag: text(etag)?,
            crc: match *crc {
                "-" => None,
                c => Some(text(c)?),
            },
            hashes: raw
                .chunks_exact(32)
                .map(|c| c.try_into().expect("32 bytes"))
                .collect(),
        })
    }
}

/// Reads a journal: its header and the parts it names (a torn or bad line
/// ends the list). `None` when there is none, or it is not one.
pub fn read(path: &Path) -> Option<(Header, Vec<PartLine>)> {
    let body = fs::read_to_string(path).ok()?;
    let mut lines = body.split_inclusive('\n');
    let header = Header::parse(lines.next()?.trim_end())?;
    let mut parts = Vec::new();
    for l in lines {
        if !l.ends_with('\n') {
            break;
        }
        match PartLine::parse(l, &header) {
            Some(p) => parts.push(p),
            None => break,
        }
    }
    Some((header, parts))
}

/// An open journal, appended to as parts are sent.
pub struct Journal {
    pub path: PathBuf,
    file: Mutex<Option<File>>,
}

impl Journal {
    /// Starts the journal of a new upload (replacing any old one).
    pub fn create(path: PathBuf, header: &Header) -> io::Result<Journal> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let mut f = File::create(&path)?;
        f.write_all(header.line().as_bytes())?;
        Ok(Journal {
            path,
            file: Mutex::new(Some(f)),
        })
    }

    /// Goes on with the journal of a resumed upload.
    pub fn reopen(path: PathBuf) -> io::Result<Journal> {
        let f = OpenOptions::new().append(true).open(&path)?;
        Ok(Journal {
            path,
            file: Mutex::new(Some(f)),
        })
    }

    /// Notes a part the store has; a journal that cannot be written only
    /// costs a resume.
    pub fn append(&self, part: &PartLine) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(file) = f.as_mut() {
            if let Err(e) = file.write_all(part.line().as_bytes()) {
                tracing::warn!(
                    "cannot write {}: {e}; this upload will not resume",
                    self.path.display()
                );
                *f = None;
            }
        }
    }

    /// The upload completed or was given up: nothing to resume.
    pub fn remove(&self) {
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
        let _ = fs::remove_file(&self.path);
    }
}

/// The headers of every journal in `dir`, for a destination asking
/// whether an upload under it was left to resume.
pub fn headers(dir: &Path) -> Vec<Header> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".upload"))
        .take(10_000)
        .filter_map(|e| {
            let body = fs::read_to_string(e.path()).ok()?;
            Header::parse(body.lines().next()?)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> Header {
        Header {
            upload_id: "abc/DEF+=".into(),
            url: "s3://b/a key/ü".into(),
            size: (20 << 20) + 5,
            mtime: 1_700_000_000,
            mtime_nsec: 5,
            block: 1 << 20,
            part: 8 << 20,
        }
    }

    #[test]
    fn a_journal_reads_back_and_stops_at_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let h = header();
        let p = path_for(
            dir.path(),
            "http://x",
            &ObjectUrl::parse("s3://bkt/k", "s3://", 1, 1024, |_| None).unwrap(),
        );
        let j = Journal::create(p.clone(), &h).unwrap();
        let part = |n: u32, blocks: usize| PartLine {
            sending: false,
            number: n,
            etag: format!("\"etag{n}\""),
            crc: (n == 1).then(|| "AAAA==".to_string()),
            hashes: (0..blocks).map(|i| [i as u8; 32]).collect(),
        };
        // A part journaled as it went out, before the store answered.
        let sending = PartLine {
            sending: true,
            etag: String::new(),
            crc: Some("BBBB==".into()),
            ..part(2, 8)
        };
        j.append(&part(1, 8));
        j.append(&sending);
        j.append(&part(3, 5));
        let (back, parts) = read(&p).unwrap();
        assert_eq!(back, h);
        assert_eq!(parts, vec![part(1, 8), sending, part(3, 5)]);
        // A line cut short, a part of the wrong length: ignored.
        let mut body = fs::read_to_string(&p).unwrap();
        body.push_str("part 2 00");
        fs::write(&p, &body).unwrap();
        assert_eq!(read(&p).unwrap().1.len(), 3);
        fs::write(&p, h.line() + &part(2, 3).line()).unwrap();
        assert!(read(&p).unwrap().1.is_empty());
        assert_eq!(headers(dir.path()), vec![h]);
        j.remove();
        assert!(read(&p).is_none());
    }

    proptest! {
        #[test]
        fn reading_any_bytes_never_panics(body in proptest::collection::vec(any::<u8>(), 0..400)) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("j.upload");
            let mut text = header().line().into_bytes();
            text.extend_from_slice(&body);
            fs::write(&p, &text).unwrap();
            let _ = read(&p);
            fs::write(&p, &body).unwrap();
            let _ = read(&p);
        }
    }
}
