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

/// An id-changing call of libc, hooked: the client connects first (`before_switch`),
/// then the real call runs.
macro_rules! switch_hook {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            before_switch();
            real::$name($($arg),*)
        }
    )*};
}

switch_hook! {
    setuid(u: uid_t);
    seteuid(u: uid_t);
    setreuid(r: uid_t, e: uid_t);
    setresuid(r: uid_t, e: uid_t, s: uid_t);
    setgid(g: gid_t);
    setegid(g: gid_t);
    setregid(r: gid_t, e: gid_t);
    setresgid(r: gid_t, e: gid_t, s: gid_t);
    setgroups(n: size_t, g: *const gid_t);
}
