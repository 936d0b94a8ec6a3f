//! Unit tests of what the library decides without a daemon: where a path goes, the
//! descriptor table, what exec passes on, fopen's modes. The test binary carries
//! the interposed functions too; with no GustFS descriptor and the mount directory
//! absent, every call it makes goes to libc as it would without them.

use super::*;

fn ours_path(p: &str) -> Option<String> {
    match route_abs(p.as_bytes()) {
        Ok(Route::Ours(s)) => Some(s),
        _ => None,
    }
}

#[test]
fn paths_under_the_mount_directory_are_ours_normalized() {
    assert_eq!(mount(), "/gustfs", "tests run without GUST_MOUNTDIR");
    assert_eq!(ours_path("/gustfs").as_deref(), Some("/"));
    assert_eq!(ours_path("/gustfs/").as_deref(), Some("/"));
    assert_eq!(ours_path("/gustfs/a/b").as_deref(), Some("/a/b"));
    assert_eq!(ours_path("//gustfs//a/./b/").as_deref(), Some("/a/b"));
    assert_eq!(ours_path("/gustfs/a/../b").as_deref(), Some("/b"));
    assert_eq!(ours_path("/tmp/../gustfs/x").as_deref(), Some("/x"), "a path that only normalizes under it");
}

#[test]
fn other_paths_go_to_libc_untouched_or_resolved() {
    for p in ["/gustfsx", "/gust", "/tmp/gustfs/a", "/", "/etc/passwd"] {
        assert!(matches!(route_abs(p.as_bytes()), Ok(Route::Real)), "{p}");
    }
    // ".." out of the mount directory: the kernel cannot resolve /gustfs, so the
    // library says what is meant.
    match route_abs(b"/gustfs/../etc/passwd") {
        Ok(Route::RealAbs(c)) => assert_eq!(c.to_str().unwrap(), "/etc/passwd"),
        _ => panic!("/gustfs/.. must leave GustFS"),
    }
    // Invalid UTF-8: EINVAL under the mount directory, libc's business elsewhere.
    assert_eq!(route_abs(b"/gustfs/\xff").err(), Some(libc::EINVAL));
    assert!(matches!(route_abs(b"/tmp//\xff"), Ok(Route::Real)));
}

#[test]
fn relative_paths_follow_the_virtual_working_directory() {
    // SAFETY: valid NUL-terminated strings.
    unsafe {
        assert!(matches!(route_cwd(c"rel".as_ptr()), Ok(Route::Real)), "no GustFS cwd: libc's");
        set_vcwd(Some("/gustfs/w".into()));
        match route_cwd(c"a/../b".as_ptr()) {
            Ok(Route::Ours(p)) => assert_eq!(p, "/w/b"),
            _ => panic!("relative to a GustFS cwd"),
        }
        match route_cwd(c"../../etc".as_ptr()) {
            Ok(Route::RealAbs(c)) => assert_eq!(c.to_str().unwrap(), "/etc"),
            _ => panic!("out of GustFS from a GustFS cwd"),
        }
        assert_eq!(std::env::var("GUST_PRELOAD_CWD").as_deref(), Ok("/gustfs/w"), "children inherit it");
        set_vcwd(None);
        assert!(std::env::var_os("GUST_PRELOAD_CWD").is_none());
        assert!(matches!(route_cwd(c"rel".as_ptr()), Ok(Route::Real)));
    }
}

#[test]
fn the_descriptor_table_maps_and_forgets() {
    // Numbers far above what the test harness opens.
    let (a, b) = (FD_MAX as c_int - 3, FD_MAX as c_int - 2);
    assert_eq!(ours(a), None);
    register(a, 0);
    register(b, 41);
    assert_eq!((ours(a), ours(b)), (Some(0), Some(41)), "client descriptor 0 is a descriptor too");
    assert!(tracked(a) && tracked(b));
    assert!(all_ours().contains(&(a, 0)) && all_ours().contains(&(b, 41)));
    assert_eq!(unregister(a), Some(0));
    assert_eq!(unregister(a), None, "forgotten once");
    assert_eq!(ours(a), None);
    assert_eq!(unregister(b), Some(41));
    for bad in [-1, FD_MAX as c_int, c_int::MAX] {
        assert_eq!(ours(bad), None);
        assert!(!tracked(bad));
        assert_eq!(unregister(bad), None);
    }
}

#[test]
fn exec_hands_descriptors_on_as_text_that_decodes_back() {
    let path = "/dir with space/ünïcode;:x";
    let item = format!("7:{}:123:{}", libc::O_WRONLY | libc::O_APPEND, exec::hex(path));
    let (fd, inh) = exec::decode_fd(&item).unwrap();
    assert_eq!((fd, inh.flags, inh.offset, inh.path.as_str()), (7, libc::O_WRONLY | libc::O_APPEND, 123, path));
    for bad in ["", "7", "7:1:2", "x:1:2:61", "7:1:2:6", "7:1:2:zz", "7:1:-2:61"] {
        assert!(exec::decode_fd(bad).is_none(), "{bad:?} decoded");
    }
}

#[test]
fn fopen_modes_give_open_flags() {
    use libc::{O_APPEND, O_CLOEXEC, O_CREAT, O_EXCL, O_RDONLY, O_RDWR, O_TRUNC, O_WRONLY};
    let f = |m: &str| stdio::mode_flags(m.as_bytes());
    assert_eq!(f("r"), Some(O_RDONLY));
    assert_eq!(f("rb+"), Some(O_RDWR));
    assert_eq!(f("w"), Some(O_WRONLY | O_CREAT | O_TRUNC));
    assert_eq!(f("w+x"), Some(O_RDWR | O_CREAT | O_TRUNC | O_EXCL));
    assert_eq!(f("ae"), Some(O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC));
    assert_eq!(f("r,ccs=UTF-8"), Some(O_RDONLY), "glibc's extensions after a comma are not flags");
    assert_eq!(f(""), None);
    assert_eq!(f("q"), None);
}
