//! `redmutex_client` and `redmutex_client_options`.

use std::ffi::c_char;
use std::time::Duration;

use redmutex::{Client, MAX_NODES};

use crate::ptr::{Out, arg, bytes, c_str, free_box};
use crate::result::{Failure, boundary, copy_str, redmutex_result};

/// A connection to one Redis server, or to several independent masters (Redlock), shared by
/// all the locks taken through it: a connection pool per node and one renew thread.
///
/// Thread-safety: a client is shared by many threads; every function that takes a
/// `const redmutex_client *` may be called on the same client from any number of threads at
/// once.
///
/// Ownership: made by `redmutex_client_new` or `redmutex_client_new_with_options`, freed
/// exactly once by `redmutex_client_free`. Guards taken through a client stay valid (and
/// keep being renewed) after the client is freed; the connections and the renew thread go
/// away with the last guard.
///
/// After `fork()`, the child makes its own client: a client inherited from the parent may
/// only be freed there (as may inherited guards, which never release the parent's lock).
pub struct redmutex_client {
    pub(crate) client: Client,
}

/// Settings for `redmutex_client_new_with_options`: timeouts, the owner label and the TLS CA.
///
/// Thread-safety: none of its own; do not change an options handle while another thread uses
/// it. It may be read by several threads at once.
///
/// Ownership: made by `redmutex_client_options_new`, freed exactly once by
/// `redmutex_client_options_free`. A client copies what it needs, so the options may be freed
/// or reused as soon as `redmutex_client_new_with_options` returns.
pub struct redmutex_client_options {
    connect_timeout: Option<Duration>,
    node_timeout: Option<Duration>,
    owner: Option<String>,
    tls_ca_cert: Option<Vec<u8>>,
    require_noeviction: bool,
}

/// The largest CA bundle accepted (a full system bundle is about 200 KiB).
const MAX_TLS_CA_CERT_LEN: usize = 16 << 20;

/// Makes a client for `urls_len` Redis URLs (`redis://host:port`,
/// `redis://user:password@host:port/db`, `rediss://` for TLS; a master behind Sentinel as
/// `redis+sentinel://s1:26379,s2:26379/mymaster`, a Redis Cluster as
/// `redis+cluster://h1:7000,h2:7000`, either over TLS as `rediss+sentinel://` or
/// `rediss+cluster://`) with default settings. With several URLs, each is an
/// independent master and a lock is held only when a majority grants it (Redlock).
///
/// Does no I/O: nodes are connected on first use, so an unreachable server shows up at the
/// first lock, not here.
///
/// On success writes a new client to `*out_client`, which the caller frees with
/// `redmutex_client_free`; on failure leaves `*out_client` alone.
///
/// Returns `REDMUTEX_RESULT_OK`; `REDMUTEX_RESULT_NULL_PARAMETER` when `urls`, one of its
/// first `urls_len` entries or `out_client` is NULL; `REDMUTEX_RESULT_INVALID_UTF8`;
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` for no URL, more than 63, or a malformed one.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_new(
    urls: *const *const c_char,
    urls_len: usize,
    out_client: *mut *mut redmutex_client,
) -> redmutex_result {
    boundary(|| {
        let out = Out::new(out_client, "out_client")?;
        let urls = read_urls(urls, urls_len)?;
        let client = Client::builder().nodes(urls).build()?;
        out.write(Box::into_raw(Box::new(redmutex_client { client })));
        Ok(())
    })
}

/// Like `redmutex_client_new`, with the settings in `options` (see
/// `redmutex_client_options_new`).
///
/// Returns as `redmutex_client_new`, plus `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is
/// NULL and `REDMUTEX_RESULT_INVALID_ARGUMENT` for a setting out of range (a timeout outside
/// 1 ms to 1 h, a bad owner label, a TLS CA without a PEM certificate or given with a URL that
/// is not `rediss://`).
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_new_with_options(
    urls: *const *const c_char,
    urls_len: usize,
    options: *const redmutex_client_options,
    out_client: *mut *mut redmutex_client,
) -> redmutex_result {
    boundary(|| {
        let options = arg(options, "options")?;
        let out = Out::new(out_client, "out_client")?;
        let urls = read_urls(urls, urls_len)?;
        let mut builder = Client::builder().nodes(urls);
        if let Some(t) = options.connect_timeout {
            builder = builder.connect_timeout(t);
        }
        if let Some(t) = options.node_timeout {
            builder = builder.node_timeout(t);
        }
        if let Some(owner) = &options.owner {
            builder = builder.owner(owner.clone());
        }
        if let Some(pem) = &options.tls_ca_cert {
            builder = builder.tls_ca_cert(pem.clone());
        }
        builder = builder.require_noeviction(options.require_noeviction);
        let client = builder.build()?;
        out.write(Box::into_raw(Box::new(redmutex_client { client })));
        Ok(())
    })
}

fn read_urls(urls: *const *const c_char, urls_len: usize) -> Result<Vec<String>, Failure> {
    if urls.is_null() {
        return Err(Failure::null("urls"));
    }
    // Checked before the array is read, so a wild length never walks off its end.
    if urls_len == 0 || urls_len > MAX_NODES {
        return Err(Failure::invalid(format!(
            "a client needs 1 to {MAX_NODES} Redis URLs, got {urls_len}"
        )));
    }
    // SAFETY: non-NULL, and the caller passes `urls_len` readable pointers.
    let urls = unsafe { std::slice::from_raw_parts(urls, urls_len) };
    urls.iter()
        .enumerate()
        .map(|(i, &url)| c_str(url, &format!("urls[{i}]")).map(str::to_owned))
        .collect()
}

/// Frees a client. Locks taken through it keep their guards (see `redmutex_client`). Must be
/// called at most once per client, after every other call on it has returned. NULL is a
/// no-op. When no guard of the client is left, it returns once the renew thread has finished
/// the round it may be sending (within 2 s) and the connections are closed.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_free(client: *mut redmutex_client) {
    let _ = boundary(|| {
        free_box(client);
        Ok(())
    });
}

/// Makes client options with every setting at its default: connect timeout 1 s, per-node
/// timeout derived from each lock's TTL, owner label `hostname:pid`.
///
/// On success writes the new options to `*out_options` (free them with
/// `redmutex_client_options_free`). Returns `REDMUTEX_RESULT_OK`, or
/// `REDMUTEX_RESULT_NULL_PARAMETER` when `out_options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_new(
    out_options: *mut *mut redmutex_client_options,
) -> redmutex_result {
    boundary(|| {
        let out = Out::new(out_options, "out_options")?;
        out.write(Box::into_raw(Box::new(redmutex_client_options {
            connect_timeout: None,
            node_timeout: None,
            owner: None,
            tls_ca_cert: None,
            require_noeviction: false,
        })));
        Ok(())
    })
}

/// Frees client options. Must be called at most once per options handle. NULL is a no-op.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_free(options: *mut redmutex_client_options) {
    let _ = boundary(|| {
        free_box(options);
        Ok(())
    });
}

/// Sets the bound on opening one connection (TCP connect, AUTH, script loading), in
/// milliseconds; default 1000. It also bounds how long a lock call keeps retrying while no
/// majority of nodes is reachable before it reports `REDMUTEX_RESULT_CONNECTION` or
/// `REDMUTEX_RESULT_NO_QUORUM`, and the client's first request to each node (which opens
/// its first connection) may take this long instead of the per-node timeout. Checked (1 ms
/// to 1 h) when the client is made.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_set_connect_timeout(
    options: *mut redmutex_client_options,
    timeout_ms: u64,
) -> redmutex_result {
    boundary(|| {
        options_mut(options)?.connect_timeout = Some(Duration::from_millis(timeout_ms));
        Ok(())
    })
}

/// Sets the per-node, per-request timeout of every lock taken through the client, in
/// milliseconds (default: 2 % of each lock's TTL, between 50 and 250 ms). A lock's own
/// `redmutex_lock_options_set_node_timeout` takes precedence. Checked (1 ms to 1 h) when the
/// client is made.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_set_node_timeout(
    options: *mut redmutex_client_options,
    timeout_ms: u64,
) -> redmutex_result {
    boundary(|| {
        options_mut(options)?.node_timeout = Some(Duration::from_millis(timeout_ms));
        Ok(())
    })
}

/// Sets the owner label that starts every lock value this client writes (default
/// `hostname:pid`), so that `GET` on a lock key tells an operator who holds it. 1 to 128
/// visible ASCII characters, checked when the client is made. The string is copied.
///
/// Returns `REDMUTEX_RESULT_OK`, `REDMUTEX_RESULT_NULL_PARAMETER` when `options` or `owner`
/// is NULL, or `REDMUTEX_RESULT_INVALID_UTF8`.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_set_owner(
    options: *mut redmutex_client_options,
    owner: *const c_char,
) -> redmutex_result {
    boundary(|| {
        let options = options_mut(options)?;
        options.owner = Some(c_str(owner, "owner")?.to_owned());
        Ok(())
    })
}

/// Sets the certificate authority, as `pem_len` bytes of PEM (one or more
/// `-----BEGIN CERTIFICATE-----` blocks), that the certificates of `rediss://` servers must
/// chain to, instead of the system's roots. The bytes are copied. Certificates are always
/// checked unless a URL ends in `#insecure` (`rediss://host:6380/#insecure`).
///
/// The PEM is checked when the client is made: `redmutex_client_new_with_options` answers
/// `REDMUTEX_RESULT_INVALID_ARGUMENT` when it holds no certificate or when a URL is not
/// `rediss://`. A server whose certificate does not chain to this CA makes lock calls fail
/// with `REDMUTEX_RESULT_CONNECTION` and a message saying the certificate verification failed.
///
/// Returns `REDMUTEX_RESULT_OK`, `REDMUTEX_RESULT_NULL_PARAMETER` when `options` or `pem` is
/// NULL, or `REDMUTEX_RESULT_INVALID_ARGUMENT` when `pem_len` is 0 or above 16 MiB.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_set_tls_ca_cert(
    options: *mut redmutex_client_options,
    pem: *const u8,
    pem_len: usize,
) -> redmutex_result {
    boundary(|| {
        let options = options_mut(options)?;
        let pem = bytes(pem, pem_len, MAX_TLS_CA_CERT_LEN, "pem")?;
        if pem.is_empty() {
            return Err(Failure::invalid("`pem` is empty"));
        }
        options.tls_ca_cert = Some(pem.to_vec());
        Ok(())
    })
}

/// Whether to refuse servers whose `maxmemory-policy` is not `noeviction` (default false:
/// such a server works, and the library logs a warning once per server). Under any
/// `allkeys-*` or `volatile-*` policy, memory pressure can evict a held lock (another client
/// then takes it) or a fence counter (fences go backwards). A refused server fails lock calls
/// at once with `REDMUTEX_RESULT_SERVER` and a message naming its policy.
///
/// Returns `REDMUTEX_RESULT_OK`, or `REDMUTEX_RESULT_NULL_PARAMETER` when `options` is NULL.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_options_set_require_noeviction(
    options: *mut redmutex_client_options,
    require: bool,
) -> redmutex_result {
    boundary(|| {
        options_mut(options)?.require_noeviction = require;
        Ok(())
    })
}

fn options_mut<'a>(
    options: *mut redmutex_client_options,
) -> Result<&'a mut redmutex_client_options, Failure> {
    // SAFETY: a non-NULL handle from redmutex_client_options_new, not shared with a writer.
    unsafe { options.as_mut() }.ok_or_else(|| Failure::null("options"))
}

/// Copies what node `index` (0-based, in the order of the client's URLs) said it runs at the
/// client's first connection to it (`Redis 7.0.15`, `Valkey 8.1.8`; for a cluster, each
/// version its masters run, comma-separated) into `buf` as a NUL-terminated string, like
/// `redmutex_last_error_message`: at most `len - 1` bytes and a NUL, and `*out_n` set to its
/// full length (cut short when `*out_n >= len`), 0 when the node was not connected to yet or
/// its server would not say. `buf` may be NULL only when `len` is 0. Local, no network.
///
/// Returns `REDMUTEX_RESULT_OK`; `REDMUTEX_RESULT_INVALID_ARGUMENT` when `index` is not one of
/// the client's nodes (so a loop from 0 ends there); `REDMUTEX_RESULT_NULL_PARAMETER` when
/// `client` or `out_n` is NULL, or `buf` is NULL while `len` is not 0.
#[unsafe(no_mangle)]
pub extern "C" fn redmutex_client_server(
    client: *const redmutex_client,
    index: usize,
    buf: *mut c_char,
    len: usize,
    out_n: *mut usize,
) -> redmutex_result {
    boundary(|| {
        let client = arg(client, "client")?;
        let out = Out::new(out_n, "out_n")?;
        if buf.is_null() && len != 0 {
            return Err(Failure::null("buf"));
        }
        let servers = client.client.servers();
        let Some(server) = servers.get(index) else {
            return Err(Failure::invalid(format!(
                "node {index} of a client of {} node(s)",
                servers.len()
            )));
        };
        out.write(copy_str(server.as_deref().unwrap_or(""), buf, len));
        Ok(())
    })
}
