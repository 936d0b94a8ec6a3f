//! The copies of an object stage: a queue of pieces (one per [`PART_BYTES`] of
//! each file, one for a small or empty file) taken by the threads, so one large
//! object moves on all of them and many small ones each on one.
//!
//! A file's state lives in a [`Progress`] shared by its pieces; the thread that
//! finishes its last piece completes it (the GustFS file gets the object's time,
//! the multipart upload is completed) or, after a failure, undoes it (the upload
//! is aborted; the staged-in file keeps a time that is not the object's, so a rerun
//! copies it again).

use super::{Job, PART_BYTES};
use crate::reason;
use crate::report::Failure;
use gust_client::Client;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// What the copies report: files done, failures, and (stage-out) the ETag the
/// store gave each object.
pub(crate) struct Copied {
    pub staged: Vec<usize>,
    pub failures: Vec<Failure>,
    pub etags: HashMap<usize, String>,
}

/// One piece: item, part number (from 0), offset, length.
#[derive(Clone, Copy)]
struct Piece {
    item: usize,
    part: u64,
    offset: u64,
    len: u64,
}

/// The part size of a file of `size` bytes: [`PART_BYTES`], or larger for files
/// that would need more parts than S3 allows (10,000).
pub(crate) fn part_bytes(size: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    PART_BYTES.max(size.div_ceil(10_000).div_ceil(MIB) * MIB)
}

fn pieces(job: &Job) -> Vec<Piece> {
    let mut out = Vec::new();
    for &i in job.todo.iter().filter(|&&i| job.plan.items[i].is_file()) {
        let size = job.plan.items[i].size;
        let part = part_bytes(size);
        let n = size.div_ceil(part).max(1);
        for k in 0..n {
            let offset = k * part;
            out.push(Piece { item: i, part: k, offset, len: part.min(size - offset) });
        }
    }
    out.reverse(); // popped from the back: in file order
    out
}

/// Per file: pieces left, the first failure, and the open GustFS descriptor
/// (stage-in) or the upload and its part ETags (stage-out).
#[derive(Default)]
struct Progress {
    left: AtomicU64,
    failed: Mutex<Option<String>>,
    fd: Mutex<Option<i32>>,
    upload: Mutex<Option<String>>,
    etags: Mutex<Vec<String>>,
}

impl Progress {
    fn fail(&self, why: String) {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(why);
    }
    fn failure(&self) -> Option<String> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Runs `piece` on every piece over the job's threads, then `finish` on each file
/// once its last piece is done (`Err` for a file that failed). Returns the staged
/// files and the failures.
fn drive(
    job: &Job,
    piece: impl Fn(&Piece, &Progress) -> Result<(), String> + Sync,
    finish: impl Fn(usize, &Progress, Option<String>) -> Result<Option<String>, String> + Sync,
) -> Copied {
    let queue = Mutex::new(pieces(job));
    let files: HashMap<usize, Progress> = job.todo.iter().map(|&i| (i, Progress::default())).collect();
    for p in queue.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        files[&p.item].left.fetch_add(1, Ordering::Relaxed);
    }
    let done = Mutex::new(Copied { staged: Vec::new(), failures: Vec::new(), etags: HashMap::new() });
    std::thread::scope(|s| {
        for _ in 0..job.threads() {
            s.spawn(|| loop {
                let Some(p) = queue.lock().unwrap_or_else(|e| e.into_inner()).pop() else { break };
                let f = &files[&p.item];
                if f.failure().is_none() {
                    job.throttle.admit(p.len);
                    if let Err(why) = piece(&p, f) {
                        f.fail(why);
                    }
                }
                job.progress.add(0, p.len);
                if f.left.fetch_sub(1, Ordering::AcqRel) != 1 {
                    continue;
                }
                job.progress.add(1, 0);
                let it = &job.plan.items[p.item];
                let mut d = done.lock().unwrap_or_else(|e| e.into_inner());
                match finish(p.item, f, f.failure()) {
                    Ok(etag) => {
                        d.staged.push(p.item);
                        if let Some(e) = etag {
                            d.etags.insert(p.item, e);
                        }
                    }
                    Err(why) => d.failures.push(Failure { path: it.src.clone(), reason: why }),
                }
            });
        }
    });
    done.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Stage-in: ranged GETs written at their offsets into the GustFS file.
pub(crate) fn copy_in(job: &Job) -> Copied {
    let (c, plan) = (job.c, job.plan);
    let piece = |p: &Piece, f: &Progress| -> Result<(), String> {
        let it = &plan.items[p.item];
        let data =
            job.store.get_range(&plan.keys[p.item], p.offset, p.len, &plan.etags[p.item]).map_err(|e| e.to_string())?;
        let fd = {
            let mut fd = f.fd.lock().unwrap_or_else(|e| e.into_inner());
            match *fd {
                Some(fd) => fd,
                None => {
                    let opened = c
                        .open(&it.dest, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, it.mode)
                        .map_err(|e| format!("{}: {}", it.dest, reason(e.0)))?;
                    *fd = Some(opened);
                    opened
                }
            }
        };
        write_all_at(c, fd, &data, p.offset).map_err(|e| format!("{}: {}", it.dest, reason(e)))
    };
    let finish = |i: usize, f: &Progress, failed: Option<String>| -> Result<Option<String>, String> {
        let it = &plan.items[i];
        let closed = match f.fd.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(fd) => c.close(fd).map_err(|e| format!("{}: {}", it.dest, reason(e.0))),
            None => Ok(()),
        };
        if let Some(why) = failed {
            return Err(why);
        }
        closed?;
        super::metadata::set(job, i)?;
        // The object's time last: only now does a rerun see the file as complete.
        c.utimens(&it.dest, Some(it.atime_ns), Some(it.mtime_ns), true)
            .map(|_| None)
            .map_err(|e| format!("{}: {}", it.dest, reason(e.0)))
    };
    drive(job, piece, finish)
}

/// Stage-out: a file of one part is one PUT; a larger one a multipart upload whose
/// parts the threads send, completed by the thread of the last part.
pub(crate) fn copy_out(job: &Job) -> Copied {
    let (c, plan, store) = (job.c, job.plan, job.store);
    let piece = |p: &Piece, f: &Progress| -> Result<(), String> {
        let it = &plan.items[p.item];
        let key = &plan.keys[p.item];
        let data = read_at(c, &it.src, p.offset, p.len)?;
        if it.size <= part_bytes(it.size) {
            let etag = store.put(key, &data, &super::metadata::properties_of(&it.xattrs)).map_err(|e| e.to_string())?;
            *f.etags.lock().unwrap_or_else(|e| e.into_inner()) = vec![etag];
            return Ok(());
        }
        let upload = {
            let mut u = f.upload.lock().unwrap_or_else(|e| e.into_inner());
            match &*u {
                Some(id) => id.clone(),
                None => {
                    let meta = super::metadata::properties_of(&it.xattrs);
                    let id = store.create_multipart(key, &meta).map_err(|e| e.to_string())?;
                    *u = Some(id.clone());
                    id
                }
            }
        };
        let etag = store.upload_part(key, &upload, (p.part + 1) as u16, &data).map_err(|e| e.to_string())?;
        let mut etags = f.etags.lock().unwrap_or_else(|e| e.into_inner());
        if etags.len() <= p.part as usize {
            etags.resize(p.part as usize + 1, String::new());
        }
        etags[p.part as usize] = etag;
        Ok(())
    };
    let finish = |i: usize, f: &Progress, failed: Option<String>| -> Result<Option<String>, String> {
        let key = &plan.keys[i];
        let etags = std::mem::take(&mut *f.etags.lock().unwrap_or_else(|e| e.into_inner()));
        let upload = f.upload.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (upload, failed) {
            (None, None) => Ok(etags.into_iter().next()),
            (None, Some(why)) => Err(why),
            (Some(id), Some(why)) => {
                let _ = store.abort_multipart(key, &id);
                Err(why)
            }
            (Some(id), None) => match store.complete_multipart(key, &id, &etags) {
                Ok(etag) => Ok(Some(etag)),
                Err(e) => {
                    let _ = store.abort_multipart(key, &id);
                    Err(e.to_string())
                }
            },
        }
    };
    drive(job, piece, finish)
}

fn write_all_at(c: &Client, fd: i32, mut data: &[u8], mut offset: u64) -> Result<(), i32> {
    while !data.is_empty() {
        let n = c.pwrite(fd, data, offset).map_err(|e| e.0)?;
        if n == 0 {
            return Err(libc::EIO);
        }
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

/// `len` bytes of a GustFS file from `offset` (a short file: it changed).
pub(crate) fn read_at(c: &Client, p: &str, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let fd = c.open(p, libc::O_RDONLY, 0).map_err(|e| format!("{p}: {}", reason(e.0)))?;
    let mut buf = vec![0u8; len as usize];
    let mut got = 0usize;
    let r = loop {
        if got == buf.len() {
            break Ok(());
        }
        match c.pread(fd, &mut buf[got..], offset + got as u64) {
            Ok(0) => break Err(reason(libc::ENODATA)),
            Ok(n) => got += n,
            Err(e) => break Err(reason(e.0)),
        }
    };
    let _ = c.close(fd);
    r.map(|_| buf).map_err(|why| format!("{p}: {why}"))
}
