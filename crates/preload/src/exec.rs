//! exec: GustFS descriptors and working directory carried into the new image.
//!
//! The kernel keeps the placeholder descriptors across exec (unless FD_CLOEXEC), but
//! the new image knows nothing of them. execve/execv/execvp/execvpe add
//! `GUST_PRELOAD_FDS` ("fd:flags:offset:hexpath;...") to the environment they pass;
//! the library in the new image reads it at load and re-opens each file lazily on
//! first use. The offset is the one at exec time: from then on parent and child
//! move independently (docs/PRELOAD.md). `GUST_PRELOAD_CWD` carries a GustFS working
//! directory (it is also kept in `environ` by chdir, for other exec paths).

#![allow(clippy::missing_safety_doc)]

use crate::{all_ours, call, real, reentrant, ret, route_cwd, Inherited, Route};
use libc::{c_char, c_int};
use std::ffi::{CStr, CString};

extern "C" {
    static environ: *const *const c_char;
}

pub(crate) fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect();
    String::from_utf8(bytes?).ok()
}

pub(crate) fn decode_fd(item: &str) -> Option<(c_int, Inherited)> {
    let mut it = item.splitn(4, ':');
    let fd = it.next()?.parse().ok()?;
    let flags = it.next()?.parse().ok()?;
    let offset = it.next()?.parse().ok()?;
    let path = unhex(it.next()?)?;
    Some((fd, Inherited { path, flags, offset }))
}

/// The GUST_PRELOAD_* entries this process hands to a new image.
unsafe fn exports() -> Vec<CString> {
    // The new image re-opens inherited descriptors by path: deferred creates first.
    crate::settle_deferred();
    // exec runs no atexit handler: this image's trace records go to its file now.
    gust_client::flush_trace();
    let mut out = Vec::new();
    let mut items = String::new();
    for (kfd, cfd) in all_ours() {
        let fdflags = real::fcntl(kfd, libc::F_GETFD, 0);
        if fdflags < 0 || fdflags & libc::FD_CLOEXEC != 0 {
            continue;
        }
        let Ok((path, flags, off)) = call(|c| {
            let (p, f) = c.fd_info(cfd)?;
            let off = c.lseek(cfd, 0, libc::SEEK_CUR).unwrap_or(0);
            Ok((p, f, off))
        }) else {
            continue;
        };
        items.push_str(&format!("{kfd}:{flags}:{off}:{};", hex(&path)));
    }
    if !items.is_empty() {
        out.push(CString::new(format!("GUST_PRELOAD_FDS={items}")).expect("no NUL"));
    }
    if let Some(c) = crate::vcwd() {
        if let Ok(s) = CString::new(format!("GUST_PRELOAD_CWD={c}")) {
            out.push(s);
        }
    }
    out
}

/// `envp` without our variables, plus `add`. The CStrings own the added strings.
unsafe fn merged_env(envp: *const *const c_char, add: &[CString]) -> Vec<*const c_char> {
    let mut v: Vec<*const c_char> = Vec::new();
    if !envp.is_null() {
        let mut p = envp;
        // Bounded by the environment's NULL terminator.
        while !(*p).is_null() {
            let s = CStr::from_ptr(*p).to_bytes();
            if !s.starts_with(b"GUST_PRELOAD_FDS=") && !s.starts_with(b"GUST_PRELOAD_CWD=") {
                v.push(*p);
            }
            p = p.add(1);
        }
    }
    v.extend(add.iter().map(|c| c.as_ptr()));
    v.push(std::ptr::null());
    v
}

/// Resolves the program path: a GustFS program cannot be executed (the kernel
/// loads it), and says so with EACCES.
unsafe fn program(p: *const c_char) -> Result<Option<CString>, i32> {
    match route_cwd(p)? {
        Route::Ours(_) => Err(libc::EACCES),
        Route::RealAbs(c) => Ok(Some(c)),
        Route::Real => Ok(None),
    }
}

#[no_mangle]
pub unsafe extern "C" fn execve(p: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    if reentrant() {
        return real::execve(p, argv, envp);
    }
    let prog = match program(p) {
        Ok(x) => x,
        Err(e) => return ret(Err(e)),
    };
    let pp = prog.as_ref().map(|c| c.as_ptr()).unwrap_or(p);
    let add = exports();
    let env = merged_env(envp, &add);
    real::execve(pp, argv, env.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn execv(p: *const c_char, argv: *const *const c_char) -> c_int {
    execve(p, argv, environ)
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(f: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    if reentrant() || f.is_null() {
        return real::execvpe(f, argv, envp);
    }
    if CStr::from_ptr(f).to_bytes().contains(&b'/') {
        return execve(f, argv, envp);
    }
    let add = exports();
    let env = merged_env(envp, &add);
    real::execvpe(f, argv, env.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn execvp(f: *const c_char, argv: *const *const c_char) -> c_int {
    execvpe(f, argv, environ)
}
