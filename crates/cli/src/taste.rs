//! `haul taste FILE...`: reads a sample of the data spread evenly over the
//! files (1 MiB blocks, small files joined as bundles join them), measures
//! the share of all-zero blocks and every codec's ratio and speed on this
//! host's cores, and estimates each compression mode's goodput at a link
//! rate with `codec::taste`'s model (issue 8, seed 004's "taste").

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

use codec::taste::{Setting, Tasting, Trial, CODECS};
use codec::{Codec, Coder};
use serde_json::json;
use wire::EntryKind;

use crate::args::TasteArgs;

/// The size of a sample block: haul's default block size.
const BLOCK: u64 = 1 << 20;
/// Link rates shown when none is given, in bits per second.
const RATES: [u64; 3] = [100_000_000, 1_000_000_000, 10_000_000_000];

pub fn run(a: TasteArgs) -> i32 {
    match taste(&a) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("haul: {e}");
            crate::exit::code(e.code)
        }
    }
}

fn taste(a: &TasteArgs) -> Result<(), connect::TransferError> {
    let walked = store::walk(&a.paths, true)?;
    let files: Vec<(PathBuf, u64)> = walked
        .entries
        .iter()
        .filter_map(|e| match e.kind {
            EntryKind::File { size, .. } if size > 0 => {
                Some((walked.paths[e.id as usize].clone(), size))
            }
            _ => None,
        })
        .collect();
    let total: u64 = files.iter().map(|f| f.1).sum();
    if total == 0 {
        return Err(connect::TransferError::new(
            wire::ErrorCode::NotFound,
            "nothing to taste: no file with data under the paths given",
        ));
    }
    let tasting = sample(&files, total, a.sample.max(BLOCK))?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let peer = a.peer_cores.unwrap_or(cores);
    // parse_rate gives bytes per second; the table is in bits.
    let rates: Vec<u64> = a.rate.map_or(RATES.to_vec(), |r| vec![r * 8]);
    let modes: Vec<Option<Codec>> = std::iter::once(Some(Codec::None))
        .chain(CODECS.iter().map(|c| Some(*c)))
        .chain(std::iter::once(None))
        .collect();
    let name = |m: &Option<Codec>| m.map_or("auto".to_string(), |c| c.name());
    let estimates: Vec<(u64, Vec<f64>)> = rates
        .iter()
        .map(|&r| {
            let at = Setting {
                link: r as f64 / 8.0,
                sender_cores: cores,
                receiver_cores: peer,
            };
            (r, modes.iter().map(|m| tasting.goodput(*m, at)).collect())
        })
        .collect();
    if a.json {
        let codecs: Vec<_> = CODECS
            .iter()
            .filter_map(|c| tasting.codec(*c))
            .map(|t| {
                json!({"codec": t.codec.name(), "ratio": t.ratio,
                       "compress_bytes_per_s_per_core": finite(t.compress_bps),
                       "decompress_bytes_per_s_per_core": finite(t.decompress_bps)})
            })
            .collect();
        let links: Vec<_> = estimates
            .iter()
            .map(|(r, g)| {
                let modes: serde_json::Map<_, _> = modes
                    .iter()
                    .zip(g)
                    .map(|(m, g)| (name(m), json!(finite(g * 8.0))))
                    .collect();
                json!({"link_bps": r, "goodput_bps": modes})
            })
            .collect();
        let out = json!({
            "files": files.len(), "bytes": total, "sampled_bytes": tasting.bytes(),
            "zero_fraction": tasting.zero_fraction(), "sender_cores": cores,
            "receiver_cores": peer, "codecs": codecs, "links": links,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{} sampled from {} files ({}); {:.1}% in all-zero blocks (never sent)",
        crate::report::bytes(tasting.bytes()),
        files.len(),
        crate::report::bytes(total),
        tasting.zero_fraction() * 100.0
    );
    println!("\ncodec     ratio   compress/core  decompress/core");
    for t in CODECS.iter().filter_map(|c| tasting.codec(*c)) {
        println!(
            "{:8} {:6.3} {:>14} {:>16}",
            t.codec.name(),
            t.ratio,
            speed(t.compress_bps),
            speed(t.decompress_bps)
        );
    }
    println!(
        "\nestimated goodput in Mbit/s ({cores} cores here, {peer} at the receiver; --peer-cores):"
    );
    print!("{:>8}", "link");
    for m in &modes {
        print!(" {:>8}", name(m));
    }
    println!("  best fixed");
    for (r, g) in &estimates {
        print!("{:>8}", rate_name(*r));
        for v in g {
            print!(" {:>8}", mbit(*v));
        }
        let best = modes[..modes.len() - 1]
            .iter()
            .zip(g)
            .max_by(|x, y| x.1.total_cmp(y.1))
            .map(|(m, _)| name(m))
            .unwrap_or_default();
        println!("  {best}");
    }
    println!(
        "\nauto decides per block as the transfer goes; this is its aim on the sample. \
         A transfer also spends cores on hashing and encryption."
    );
    Ok(())
}

/// Reads `want` bytes of sample blocks spread evenly over the files, as
/// if they were one stream: a block of a large file is one of its aligned
/// blocks; small files are joined to a block, as bundles join them.
fn sample(
    files: &[(PathBuf, u64)],
    total: u64,
    want: u64,
) -> Result<Tasting, connect::TransferError> {
    let blocks = total.div_ceil(BLOCK);
    let n = blocks.min(want / BLOCK).max(1);
    let mut tasting = Tasting::default();
    let mut coders: Vec<Coder> = CODECS.iter().map(|_| Coder::new()).collect();
    let (mut z, mut back) = (Vec::new(), Vec::new());
    let mut starts = Vec::with_capacity(files.len());
    let mut at = 0u64;
    for f in files {
        starts.push(at);
        at += f.1;
    }
    let mut last = None;
    for k in 0..n {
        let pos = (k * blocks / n) * BLOCK;
        let i = starts.partition_point(|&s| s <= pos) - 1;
        let offset = if files[i].1 >= BLOCK {
            (pos - starts[i]) / BLOCK * BLOCK
        } else {
            0
        };
        if last == Some((i, offset)) {
            continue;
        }
        last = Some((i, offset));
        let block = read_joined(files, i, offset)?;
        tasting.add(&block, || {
            CODECS
                .iter()
                .zip(coders.iter_mut())
                .map(|(&codec, coder)| {
                    let t = Instant::now();
                    coder.compress(codec, &block, &mut z);
                    let compress = t.elapsed();
                    let t = Instant::now();
                    coder
                        .decompress(codec, &z, block.len(), &mut back)
                        .expect("a block decompresses to what it was");
                    Trial {
                        codec,
                        out: z.len(),
                        compress,
                        decompress: t.elapsed(),
                    }
                })
                .collect()
        });
    }
    Ok(tasting)
}

/// Up to one block from file `i` at `offset`; a small file is followed by
/// the next small files until the block is full.
fn read_joined(
    files: &[(PathBuf, u64)],
    mut i: usize,
    offset: u64,
) -> Result<Vec<u8>, connect::TransferError> {
    let mut out = Vec::with_capacity(BLOCK as usize);
    let mut offset = offset;
    while i < files.len() && (out.len() as u64) < BLOCK {
        let (path, size) = &files[i];
        if !out.is_empty() && *size >= BLOCK {
            break;
        }
        let len = (size - offset).min(BLOCK - out.len() as u64) as usize;
        let at = out.len();
        out.resize(at + len, 0);
        let f = File::open(path).map_err(|e| store::StoreError::io("open", path, &e))?;
        f.read_exact_at(&mut out[at..], offset)
            .map_err(|e| store::StoreError::io("read", path, &e))?;
        (i, offset) = (i + 1, 0);
    }
    Ok(out)
}

fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

fn speed(bps: f64) -> String {
    if !bps.is_finite() {
        "-".into()
    } else if bps >= 1e9 {
        format!("{:.1} GB/s", bps / 1e9)
    } else {
        format!("{:.0} MB/s", bps / 1e6)
    }
}

fn mbit(bytes_per_s: f64) -> String {
    if bytes_per_s.is_finite() {
        format!("{:.0}", bytes_per_s * 8.0 / 1e6)
    } else {
        "inf".into()
    }
}

fn rate_name(bits: u64) -> String {
    match bits {
        b if b >= 1_000_000_000 && b % 1_000_000_000 == 0 => format!("{}G", b / 1_000_000_000),
        b if b >= 1_000_000 && b % 1_000_000 == 0 => format!("{}M", b / 1_000_000),
        b => format!("{b}"),
    }
}
