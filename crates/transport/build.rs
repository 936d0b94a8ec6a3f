//! Compiles the libfabric shim (src/ofi/shim.c) where libfabric's headers are
//! installed (Debian: libfabric-dev), and sets `gust_ofi` so the `ofi` endpoint kind
//! is built. Without the headers the kind still parses, and using it says why it
//! cannot work. The library itself is opened at run time (dlopen), never linked.
use std::path::Path;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(gust_ofi)");
    println!("cargo:rerun-if-changed=src/ofi/shim.c");
    println!("cargo:rerun-if-env-changed=GUST_NO_OFI");
    let header = ["/usr/include/rdma/fabric.h", "/usr/local/include/rdma/fabric.h"];
    let Some(dir) = header.iter().find(|h| Path::new(h).exists()) else {
        println!("cargo:warning=libfabric's headers (rdma/fabric.h) not found: the ofi endpoint kind is left out");
        return;
    };
    if std::env::var_os("GUST_NO_OFI").is_some() {
        return;
    }
    let include = Path::new(dir).parent().and_then(Path::parent).expect("include directory");
    cc::Build::new()
        .file("src/ofi/shim.c")
        .include(include)
        .warnings(true)
        .flag_if_supported("-std=c11")
        .compile("gust_ofi_shim");
    println!("cargo:rustc-link-lib=dl");
    println!("cargo:rustc-cfg=gust_ofi");
}
