//! realpath and canonicalize_file_name: symlinks resolved component by component by
//! the client, the answer given as a path under the mount directory.

use super::{by_path, out_str};
use crate::{call, external, real};
use gust_client::path::{join, parent};
use gust_client::{Errno, Kind};
use libc::{c_char, size_t};

/// Symlinks realpath follows before ELOOP.
const SYMLINK_HOPS_MAX: u32 = 40;

/// Resolves every symlink of an internal path, component by component.
fn resolve_all(p: &str) -> Result<String, i32> {
    call(|c| {
        let mut todo: Vec<String> = p.split('/').rev().filter(|s| !s.is_empty()).map(String::from).collect();
        let mut done = String::from("/");
        let mut hops = 0u32;
        while let Some(comp) = todo.pop() {
            if comp == "." {
                continue;
            }
            if comp == ".." {
                done = parent(&done).to_string();
                continue;
            }
            let cand = join(&done, &comp);
            let st = c.lstat(&cand)?;
            if st.kind == Kind::Symlink {
                hops += 1;
                if hops > SYMLINK_HOPS_MAX {
                    return Err(Errno(libc::ELOOP));
                }
                let t = c.readlink(&cand)?;
                if t.starts_with('/') {
                    // Targets outside the mount directory are outside GustFS.
                    let inner = c.internal_path(&t).ok_or(Errno(libc::EXDEV))?;
                    done = "/".into();
                    todo.extend(inner.split('/').rev().filter(|s| !s.is_empty()).map(String::from));
                } else {
                    todo.extend(t.split('/').rev().filter(|s| !s.is_empty()).map(String::from));
                }
                continue;
            }
            if !todo.is_empty() && st.kind != Kind::Dir {
                return Err(Errno(libc::ENOTDIR));
            }
            done = cand;
        }
        Ok(done)
    })
}

unsafe fn realpath_any(
    p: *const c_char,
    r: *mut c_char,
    realf: impl FnOnce(*const c_char) -> *mut c_char,
) -> *mut c_char {
    by_path(libc::AT_FDCWD, p, realf, |i| {
        let s = external(&resolve_all(&i)?);
        if s.len() >= libc::PATH_MAX as usize {
            return Err(libc::ENAMETOOLONG);
        }
        // out_str reports its own failure (NULL, errno set).
        Ok(out_str(&s, r, if r.is_null() { 0 } else { libc::PATH_MAX as usize }, true))
    })
}

#[no_mangle]
pub unsafe extern "C" fn realpath(p: *const c_char, r: *mut c_char) -> *mut c_char {
    realpath_any(p, r, |p| real::realpath(p, r))
}
#[no_mangle]
pub unsafe extern "C" fn __realpath_chk(p: *const c_char, r: *mut c_char, _n: size_t) -> *mut c_char {
    realpath_any(p, r, |p| real::realpath(p, r))
}
#[no_mangle]
pub unsafe extern "C" fn canonicalize_file_name(p: *const c_char) -> *mut c_char {
    realpath_any(p, std::ptr::null_mut(), |p| real::canonicalize_file_name(p))
}
