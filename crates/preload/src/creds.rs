//! Changes of the process's ids (setuid, seteuid, setgroups, ...): the client is
//! built, and its connections opened, before the change, while the process may
//! still read the instance's hosts file and secret and reach its daemons' sockets
//! (a service or a test suite run as root that drops to another user, as pjdfstest
//! does). The ids after the change are the caller's from then on (the client reads
//! them per call: gust-client's credentials.rs and permissions.rs).

use crate::real;
use libc::{c_int, gid_t, size_t, uid_t};

/// Builds the client and connects to every daemon, if there is an instance.
fn before_switch() {
    if crate::reentrant() || std::env::var_os("GUST_HOSTS_FILE").is_none() {
        return;
    }
    let _ = crate::call(|c| {
        c.connect_all();
        Ok(())
    });
}

#[no_mangle]
pub unsafe extern "C" fn setuid(u: uid_t) -> c_int {
    before_switch();
    real::setuid(u)
}
#[no_mangle]
pub unsafe extern "C" fn seteuid(u: uid_t) -> c_int {
    before_switch();
    real::seteuid(u)
}
#[no_mangle]
pub unsafe extern "C" fn setreuid(r: uid_t, e: uid_t) -> c_int {
    before_switch();
    real::setreuid(r, e)
}
#[no_mangle]
pub unsafe extern "C" fn setresuid(r: uid_t, e: uid_t, s: uid_t) -> c_int {
    before_switch();
    real::setresuid(r, e, s)
}
#[no_mangle]
pub unsafe extern "C" fn setgid(g: gid_t) -> c_int {
    before_switch();
    real::setgid(g)
}
#[no_mangle]
pub unsafe extern "C" fn setegid(g: gid_t) -> c_int {
    before_switch();
    real::setegid(g)
}
#[no_mangle]
pub unsafe extern "C" fn setregid(r: gid_t, e: gid_t) -> c_int {
    before_switch();
    real::setregid(r, e)
}
#[no_mangle]
pub unsafe extern "C" fn setresgid(r: gid_t, e: gid_t, s: gid_t) -> c_int {
    before_switch();
    real::setresgid(r, e, s)
}
#[no_mangle]
pub unsafe extern "C" fn setgroups(n: size_t, g: *const gid_t) -> c_int {
    before_switch();
    real::setgroups(n, g)
}
