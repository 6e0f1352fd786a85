//! Gives libredmutex.so its SONAME, `libredmutex.so.<major>`, so that programs linked against
//! it keep loading across compatible upgrades and packagers can install it with the usual
//! symlinks (`libredmutex.so` → `libredmutex.so.0` → `libredmutex.so.0.1.0`).

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libredmutex.so.{major}");
    }
}
