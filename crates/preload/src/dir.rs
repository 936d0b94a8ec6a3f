//! Directory streams: opendir/fdopendir/readdir/closedir/... and getdents64.
//!
//! A GustFS `DIR*` is a [`GDir`], told apart from glibc's by its first word: glibc's
//! stream starts with (fd, lock) and its lock is never the magic's upper half.
//! Entries stream from the client page by page ([`gust_client::DirStream`], with
//! attributes: the stat calls that follow a listing are answered from it), so a
//! huge directory never needs a huge buffer. "." and ".." come first, as on Linux.

#![allow(clippy::missing_safety_doc)]

use crate::fs::open::gust_open;
use crate::fs::{by_fd, by_path};
use crate::{call, ours, real, reentrant, route_cwd, set_errno, Guard, Route};
use gust_client::{DirStream, Kind};
use libc::{c_char, c_int, c_long, c_void, dirent64, size_t, ssize_t, DIR};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const GDIR_MAGIC: u64 = 0x7A3C_91E5_4744_4952;
/// Open GustFS streams; while zero, readdir never looks at a stream's first word.
static GDIRS_OPEN: AtomicUsize = AtomicUsize::new(0);

struct Cursor {
    path: String,
    stream: Option<DirStream<'static>>,
    /// Entries handed out so far (telldir).
    pos: u64,
    dots: u8,
    ahead: Option<(String, u8)>,
}

fn dtype(k: Kind) -> u8 {
    gust_client::d_type(k)
}

/// A stable, non-zero inode number for an entry (some programs skip d_ino == 0).
fn fake_ino(dir: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in dir.bytes().chain([b'/']).chain(name.bytes()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h | 2
}

impl Cursor {
    fn open(path: String) -> Result<Cursor, i32> {
        let stream = call(|c| c.opendir_plus(&path))?;
        Ok(Cursor { path, stream: Some(stream), pos: 0, dots: 0, ahead: None })
    }

    fn rewind(&mut self) -> Result<(), i32> {
        self.stream = None;
        self.stream = Some(call(|c| c.opendir_plus(&self.path))?);
        self.pos = 0;
        self.dots = 0;
        self.ahead = None;
        Ok(())
    }

    fn next(&mut self) -> Result<Option<(String, u8)>, i32> {
        let r = if let Some(x) = self.ahead.take() {
            Some(x)
        } else if self.dots < 2 {
            self.dots += 1;
            Some((if self.dots == 1 { "." } else { ".." }.to_string(), libc::DT_DIR))
        } else {
            let Some(s) = self.stream.as_mut() else { return Ok(None) };
            let _g = Guard::enter();
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.next())) {
                Ok(None) => None,
                Ok(Some(Ok(e))) => Some((e.name, dtype(e.kind))),
                Ok(Some(Err(e))) => return Err(e.0),
                Err(_) => return Err(libc::EIO),
            }
        };
        if r.is_some() {
            self.pos += 1;
        }
        Ok(r)
    }

    fn push_back(&mut self, e: (String, u8)) {
        self.pos -= 1;
        self.ahead = Some(e);
    }
}

#[repr(C)]
struct GDir {
    magic: u64,
    fd: c_int,
    cur: Cursor,
    ent: dirent64,
}

unsafe fn as_gdir(d: *mut DIR) -> Option<&'static mut GDir> {
    if d.is_null() || GDIRS_OPEN.load(Ordering::Acquire) == 0 {
        return None;
    }
    let g = d as *mut GDir;
    if (*(g as *const u64)) == GDIR_MAGIC {
        Some(&mut *g)
    } else {
        None
    }
}

unsafe fn new_gdir(fd: c_int, path: String) -> *mut DIR {
    match Cursor::open(path) {
        Ok(cur) => {
            GDIRS_OPEN.fetch_add(1, Ordering::AcqRel);
            Box::into_raw(Box::new(GDir { magic: GDIR_MAGIC, fd, cur, ent: std::mem::zeroed() })) as *mut DIR
        }
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn opendir(p: *const c_char) -> *mut DIR {
    by_path(
        libc::AT_FDCWD,
        p,
        |p| real::opendir(p),
        |i| {
            let fd = gust_open(&i, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0)?;
            let path = ours(fd).and_then(|c| call(|cl| cl.fd_info(c)).ok()).map(|x| x.0).unwrap_or(i);
            let d = new_gdir(fd, path);
            if d.is_null() {
                let e = crate::get_errno();
                crate::fs::open::close_ours(fd);
                return Err(e);
            }
            Ok(d)
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    by_fd(
        fd,
        || real::fdopendir(fd),
        |c| {
            let (path, kind) = call(|cl| Ok((cl.fd_info(c)?.0, cl.fstat(c)?.kind)))?;
            if kind != Kind::Dir {
                return Err(libc::ENOTDIR);
            }
            // new_gdir reports its own failure (NULL, errno set).
            Ok(new_gdir(fd, path))
        },
    )
}

unsafe fn gdir_next(g: &mut GDir) -> *mut dirent64 {
    let saved = crate::get_errno();
    match g.cur.next() {
        Ok(Some((name, t))) => {
            let e = &mut g.ent;
            let n = name.len().min(255);
            e.d_ino = fake_ino(&g.cur.path, &name);
            e.d_off = g.cur.pos as i64;
            e.d_reclen = std::mem::size_of::<dirent64>() as u16;
            e.d_type = t;
            std::ptr::copy_nonoverlapping(name.as_ptr(), e.d_name.as_mut_ptr().cast::<u8>(), n);
            e.d_name[n] = 0;
            set_errno(saved);
            e
        }
        Ok(None) => {
            set_errno(saved);
            std::ptr::null_mut()
        }
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent {
    match as_gdir(d) {
        None => real::readdir(d),
        Some(g) => gdir_next(g) as *mut libc::dirent,
    }
}
#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut dirent64 {
    match as_gdir(d) {
        None => real::readdir64(d),
        Some(g) => gdir_next(g),
    }
}
#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    match as_gdir(d) {
        None => real::closedir(d),
        Some(g) => {
            let g = Box::from_raw(g as *mut GDir);
            GDIRS_OPEN.fetch_sub(1, Ordering::AcqRel);
            let fd = g.fd;
            drop(g);
            crate::fs::open::close(fd)
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    match as_gdir(d) {
        None => real::dirfd(d),
        Some(g) => g.fd,
    }
}
#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    match as_gdir(d) {
        None => real::rewinddir(d),
        Some(g) => {
            let _ = g.cur.rewind();
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    match as_gdir(d) {
        None => real::telldir(d),
        Some(g) => g.cur.pos as c_long,
    }
}
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, pos: c_long) {
    match as_gdir(d) {
        None => real::seekdir(d, pos),
        Some(g) => {
            if g.cur.rewind().is_ok() {
                // Bounded by the position asked for.
                while (g.cur.pos as c_long) < pos {
                    match g.cur.next() {
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
            }
        }
    }
}

/// getdents64 cursors, per descriptor (rarely used; a lock is fine here).
static FD_CURSORS: Mutex<Option<HashMap<c_int, Cursor>>> = Mutex::new(None);

pub(crate) fn forget_fd(fd: c_int) {
    let _g = Guard::enter();
    let mut m = FD_CURSORS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = m.as_mut() {
        m.remove(&fd);
    }
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, b: *mut c_void, n: size_t) -> ssize_t {
    by_fd(
        fd,
        || real::getdents64(fd, b, n),
        |c| {
            let _g = Guard::enter();
            let mut lock = FD_CURSORS.lock().unwrap_or_else(|e| e.into_inner());
            let map = lock.get_or_insert_with(HashMap::new);
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry(fd) {
                let (path, kind) = call(|cl| Ok((cl.fd_info(c)?.0, cl.fstat(c)?.kind)))?;
                if kind != Kind::Dir {
                    return Err(libc::ENOTDIR);
                }
                e.insert(Cursor::open(path)?);
            }
            let cur = map.get_mut(&fd).expect("inserted above");
            let mut used = 0usize;
            // d_ino, d_off, d_reclen, d_type, name, NUL; 8-byte aligned.
            let header = 8 + 8 + 2 + 1;
            while let Some((name, t)) = cur.next()? {
                let len = (header + name.len() + 1).div_ceil(8) * 8;
                if used + len > n {
                    if used == 0 {
                        cur.push_back((name, t));
                        return Err(libc::EINVAL);
                    }
                    cur.push_back((name, t));
                    break;
                }
                let p = (b as *mut u8).add(used);
                std::ptr::write_bytes(p, 0, len);
                (p as *mut u64).write_unaligned(fake_ino(&cur.path, &name));
                (p.add(8) as *mut i64).write_unaligned(cur.pos as i64);
                (p.add(16) as *mut u16).write_unaligned(len as u16);
                *p.add(18) = t;
                std::ptr::copy_nonoverlapping(name.as_ptr(), p.add(19), name.len());
                used += len;
            }
            Ok(used as ssize_t)
        },
    )
}

// ----- readdir_r and scandir ------------------------------------------------------------
//
// glibc's scandir calls its own opendir/readdir internally, past this library, so
// GustFS directories need their own scandir. On x86-64 and AArch64 glibc, `dirent`
// and `dirent64` have the same layout, which both pairs below rely on.

pub type Filter = Option<unsafe extern "C" fn(*const libc::dirent) -> c_int>;
pub type Compar = Option<unsafe extern "C" fn(*mut *const libc::dirent, *mut *const libc::dirent) -> c_int>;
pub type Filter64 = Option<unsafe extern "C" fn(*const dirent64) -> c_int>;
pub type Compar64 = Option<unsafe extern "C" fn(*mut *const dirent64, *mut *const dirent64) -> c_int>;

const _: () = assert!(std::mem::size_of::<libc::dirent>() == std::mem::size_of::<dirent64>());

unsafe fn readdir_r_gust(g: &mut GDir, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
    let saved = crate::get_errno();
    set_errno(0);
    let e = gdir_next(g);
    let err = crate::get_errno();
    set_errno(saved);
    if e.is_null() {
        *result = std::ptr::null_mut();
        return err; // 0 at the end of the directory
    }
    std::ptr::copy_nonoverlapping(e as *const u8, entry as *mut u8, std::mem::size_of::<dirent64>());
    *result = entry;
    0
}

#[no_mangle]
pub unsafe extern "C" fn readdir_r(d: *mut DIR, entry: *mut libc::dirent, result: *mut *mut libc::dirent) -> c_int {
    match as_gdir(d) {
        None => real::readdir_r(d, entry, result),
        Some(g) => readdir_r_gust(g, entry as *mut dirent64, result as *mut *mut dirent64),
    }
}
#[no_mangle]
pub unsafe extern "C" fn readdir64_r(d: *mut DIR, entry: *mut dirent64, result: *mut *mut dirent64) -> c_int {
    match as_gdir(d) {
        None => real::readdir64_r(d, entry, result),
        Some(g) => readdir_r_gust(g, entry, result),
    }
}

/// scandir over a GustFS directory: entries copied into malloc'd records, filtered,
/// sorted with qsort, returned in a malloc'd array, as glibc does.
unsafe fn scandir_gust(
    p: *const c_char,
    namelist: *mut *mut *mut dirent64,
    filter: Filter64,
    compar: Compar64,
) -> c_int {
    let d = opendir(p);
    if d.is_null() {
        return -1;
    }
    let mut v: Vec<*mut dirent64> = Vec::new();
    let fail = |v: &mut Vec<*mut dirent64>, e: c_int| {
        for x in v.drain(..) {
            libc::free(x as *mut c_void);
        }
        closedir(d);
        set_errno(e);
        -1
    };
    loop {
        set_errno(0);
        let e = readdir64(d);
        if e.is_null() {
            let err = crate::get_errno();
            if err != 0 {
                return fail(&mut v, err);
            }
            break;
        }
        if let Some(f) = filter {
            if f(e) == 0 {
                continue;
            }
        }
        let copy = libc::malloc(std::mem::size_of::<dirent64>()) as *mut dirent64;
        if copy.is_null() {
            return fail(&mut v, libc::ENOMEM);
        }
        std::ptr::copy_nonoverlapping(e as *const u8, copy as *mut u8, std::mem::size_of::<dirent64>());
        v.push(copy);
    }
    closedir(d);
    if let Some(c) = compar {
        // SAFETY: qsort hands the comparator pointers to elements, each a *mut dirent64,
        // which is exactly `const struct dirent64 **`.
        let c: unsafe extern "C" fn(*const c_void, *const c_void) -> c_int = std::mem::transmute(c);
        libc::qsort(v.as_mut_ptr() as *mut c_void, v.len(), std::mem::size_of::<*mut dirent64>(), Some(c));
    }
    let arr = libc::malloc(v.len().max(1) * std::mem::size_of::<*mut dirent64>()) as *mut *mut dirent64;
    if arr.is_null() {
        return fail(&mut v, libc::ENOMEM);
    }
    std::ptr::copy_nonoverlapping(v.as_ptr(), arr, v.len());
    *namelist = arr;
    v.len() as c_int
}

unsafe fn scandir_route(p: *const c_char) -> Result<Option<std::ffi::CString>, i32> {
    // Ok(None): ours; Ok(Some(path)): libc's, with this path.
    if reentrant() {
        return Ok(Some(std::ffi::CStr::from_ptr(p).to_owned()));
    }
    match route_cwd(p)? {
        Route::Real => Ok(Some(std::ffi::CStr::from_ptr(p).to_owned())),
        Route::RealAbs(c) => Ok(Some(c)),
        Route::Ours(_) => Ok(None),
    }
}

#[no_mangle]
pub unsafe extern "C" fn scandir(
    p: *const c_char,
    namelist: *mut *mut *mut libc::dirent,
    filter: Filter,
    compar: Compar,
) -> c_int {
    if p.is_null() {
        return real::scandir(p, namelist, filter, compar);
    }
    match scandir_route(p) {
        Ok(Some(c)) => real::scandir(c.as_ptr(), namelist, filter, compar),
        Ok(None) => scandir_gust(
            p,
            namelist as *mut *mut *mut dirent64,
            std::mem::transmute::<Filter, Filter64>(filter),
            std::mem::transmute::<Compar, Compar64>(compar),
        ),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}
#[no_mangle]
pub unsafe extern "C" fn scandir64(
    p: *const c_char,
    namelist: *mut *mut *mut dirent64,
    filter: Filter64,
    compar: Compar64,
) -> c_int {
    if p.is_null() {
        return real::scandir64(p, namelist, filter, compar);
    }
    match scandir_route(p) {
        Ok(Some(c)) => real::scandir64(c.as_ptr(), namelist, filter, compar),
        Ok(None) => scandir_gust(p, namelist, filter, compar),
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}
