//! The diagnostics endpoints beside `/metrics` (INTERFACE-FACTS §3 "Component extras": `GET
//! /debug/pprof/*` and `PUT /debug/flags/v`; docs/src/reference/diagnostics.md), served by the
//! manager and the webhook on `--diagnostics-address`, behind the same authentication as metrics:
//! every request is authorized for its own URL path and HTTP verb ([`crate::authorize`]).
//!
//! - `GET /debug/pprof/` lists the profiles.
//! - `GET /debug/pprof/profile?seconds=N` samples the CPU for N seconds (default 30, 1 to 300)
//!   and answers a gzipped pprof protobuf, as Go's endpoint does; one profile at a time.
//! - `GET /debug/pprof/heap` answers the live heap as a gzipped pprof protobuf, from jemalloc's
//!   sampling profiler: the binaries run on jemalloc with sampling on from start-up
//!   ([`heap_profiled!`](crate::heap_profiled)). jemalloc dumps into a memfd, never a file, so
//!   this works in images with no writable (or no) `/tmp`.
//! - `GET /debug/flags/v` answers the log verbosity; `PUT /debug/flags/v` with a number 0 to 10
//!   as the body sets it, until the next restart.
//!
//! `--insecure-diagnostics` serves none of these: they only exist behind authentication.

use std::ffi::CString;
use std::io::{BufReader, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::RawQuery;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::{DiagnosticsAuth, authorize};

/// The CPU profile's length when `seconds` is not given.
pub const DEFAULT_CPU_SECONDS: u64 = 30;
/// The longest CPU profile.
pub const MAX_CPU_SECONDS: u64 = 300;
/// The sampling rate of CPU profiles, per second (Go's too).
pub const CPU_SAMPLE_HZ: i32 = 100;
/// The highest verbosity `/debug/flags/v` accepts.
pub const MAX_VERBOSITY: u8 = 10;
/// The content type of a pprof profile (gzipped protobuf).
pub const PPROF_CONTENT_TYPE: &str = "application/octet-stream";

/// jemalloc's options in the binaries ([`heap_profiled!`](crate::heap_profiled)): the heap
/// profiler on and active from start-up, sampling one allocation per 2^19 bytes (512 KiB) on
/// average, as Go's runtime does. Operators may add options with `_RJEM_MALLOC_CONF`.
pub const MALLOC_CONF: &std::ffi::CStr = c"prof:true,prof_active:true,lg_prof_sample:19";

/// The allocator [`heap_profiled!`](crate::heap_profiled) installs.
pub use tikv_jemallocator::Jemalloc;

/// A C string pointer that a `static` can hold: jemalloc's `malloc_conf` symbol is a `const char
/// *`.
#[repr(transparent)]
#[derive(Debug)]
pub struct MallocConf(pub *const std::ffi::c_char);

// SAFETY: the pointer is to a `'static` C string literal that nothing writes.
#[allow(unsafe_code)]
unsafe impl Sync for MallocConf {}

/// Makes the calling binary allocate with jemalloc and sample its heap from start-up, for `GET
/// /debug/pprof/heap`: installs [`Jemalloc`] as the global allocator and defines jemalloc's
/// `malloc_conf` (prefixed `_rjem_`) as [`MALLOC_CONF`]. Use once, in the binary's root module
/// (the symbol must be in the binary itself; the manager and the webhook do).
#[macro_export]
macro_rules! heap_profiled {
    () => {
        #[global_allocator]
        static CAPTF_ALLOCATOR: $crate::debug::Jemalloc = $crate::debug::Jemalloc;

        /// jemalloc reads its options from this symbol once, when it starts.
        #[allow(unsafe_code)]
        #[unsafe(export_name = "_rjem_malloc_conf")]
        static CAPTF_MALLOC_CONF: $crate::debug::MallocConf =
            $crate::debug::MallocConf($crate::debug::MALLOC_CONF.as_ptr());
    };
}

/// The process's log verbosity, readable and settable at run time (`/debug/flags/v`). The binary
/// builds it from its log subscriber's reload handle and [`install_log_level`]s it once.
#[derive(Clone)]
pub struct LogLevel {
    inner: Arc<LogLevelInner>,
}

type ApplyVerbosity = dyn Fn(u8) -> Result<(), String> + Send + Sync;

struct LogLevelInner {
    current: Mutex<u8>,
    apply: Box<ApplyVerbosity>,
}

impl std::fmt::Debug for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogLevel")
            .field("verbosity", &self.get())
            .finish_non_exhaustive()
    }
}

impl LogLevel {
    /// A verbosity that starts at `initial`; `apply` makes a new one take effect (reloads the
    /// log filter) or says why it cannot.
    pub fn new(
        initial: u8,
        apply: impl Fn(u8) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner: Arc::new(LogLevelInner {
                current: Mutex::new(initial),
                apply: Box::new(apply),
            }),
        }
    }

    /// The verbosity in effect.
    pub fn get(&self) -> u8 {
        *self
            .inner
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes `v` the verbosity; on error the previous one stays.
    pub fn set(&self, v: u8) -> Result<(), String> {
        if v > MAX_VERBOSITY {
            return Err(format!("verbosity {v} is above {MAX_VERBOSITY}"));
        }
        let mut current = self
            .inner
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (self.inner.apply)(v)?;
        *current = v;
        Ok(())
    }
}

static LOG_LEVEL: OnceLock<LogLevel> = OnceLock::new();

/// Makes `level` the process's run-time log verbosity (`/debug/flags/v`). The log subscriber is
/// process-wide, so this is too: a second call is ignored and says so (`false`).
pub fn install_log_level(level: LogLevel) -> bool {
    LOG_LEVEL.set(level).is_ok()
}

/// Builds a `tracing` env filter for a verbosity: the binary's own mapping.
pub type FilterFor = fn(u8) -> tracing_subscriber::EnvFilter;

/// Starts the process's log subscriber (`text` or `json` lines on stderr) with the `initial`
/// filter (the one of `verbosity`, or one the binary took from its environment), and makes
/// `/debug/flags/v` replace it with `filter_for` a new verbosity ([`install_log_level`]). An
/// unknown format is an error naming it.
pub fn init_logging(
    format: &str,
    verbosity: u8,
    initial: tracing_subscriber::EnvFilter,
    filter_for: FilterFor,
) -> anyhow::Result<()> {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(initial);
    let level = match format {
        "text" => reloadable(builder, verbosity, filter_for)?,
        "json" => reloadable(builder.json().flatten_event(true), verbosity, filter_for)?,
        other => anyhow::bail!("--logging-format must be text or json, not {other:?}"),
    };
    install_log_level(level);
    Ok(())
}

/// Installs `builder`'s subscriber with a reloadable filter, and answers the [`LogLevel`] that
/// replaces the filter with `filter_for` a new verbosity. The text and the json subscribers
/// differ only in their field and event formats (`N`, `E`).
fn reloadable<N, E, W>(
    builder: tracing_subscriber::fmt::SubscriberBuilder<N, E, tracing_subscriber::EnvFilter, W>,
    verbosity: u8,
    filter_for: FilterFor,
) -> anyhow::Result<LogLevel>
where
    N: for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static,
    E: tracing_subscriber::fmt::FormatEvent<tracing_subscriber::Registry, N>
        + Send
        + Sync
        + 'static,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = builder.with_filter_reloading();
    let handle = builder.reload_handle();
    builder.try_init().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(LogLevel::new(verbosity, move |v| {
        handle.reload(filter_for(v)).map_err(|e| e.to_string())
    }))
}

/// `handler` behind [`authorize`]: each request is checked for its path and verb first.
fn guarded(
    auth: &DiagnosticsAuth,
    handler: fn(Option<String>, Bytes) -> Handled,
) -> impl Fn(Method, Uri, HeaderMap, RawQuery, Bytes) -> Handled + Clone + Send + Sync + 'static {
    let auth = auth.clone();
    move |method: Method, uri: Uri, headers: HeaderMap, query: RawQuery, body: Bytes| {
        let auth = auth.clone();
        Box::pin(async move {
            let verb = method.as_str().to_ascii_lowercase();
            if let Err(status) = authorize(&auth, &headers, uri.path(), &verb).await {
                return status.into_response();
            }
            handler(query.0, body).await
        })
    }
}

/// The `/debug/...` router: the profiles ([`pprof_router`]) and the log level. Each request is
/// [`authorize`]d for its path and verb first.
pub fn debug_router(auth: &DiagnosticsAuth) -> Router {
    pprof_router(auth).route(
        "/debug/flags/v",
        get(guarded(auth, |_, _| Box::pin(async { verbosity() }))).put(guarded(auth, |_, body| {
            Box::pin(async move { set_verbosity(&body) })
        })),
    )
}

/// The profiles alone, each request [`authorize`]d first. With [`DiagnosticsAuth::Open`] it is
/// the manager's `--profiler-address` (plain HTTP, meant for a loopback address or a
/// port-forward): no log-level endpoint there, since changing what a process logs stays behind
/// authentication.
pub fn pprof_router(auth: &DiagnosticsAuth) -> Router {
    Router::new()
        .route(
            "/debug/pprof/",
            get(guarded(auth, |_, _| Box::pin(async { index() }))),
        )
        .route(
            "/debug/pprof/profile",
            get(guarded(auth, |q, _| Box::pin(cpu_profile(q)))),
        )
        .route(
            "/debug/pprof/heap",
            get(guarded(auth, |_, _| Box::pin(heap_profile()))),
        )
}

type Handled = std::pin::Pin<Box<dyn Future<Output = Response> + Send>>;

fn index() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "profile  CPU profile: GET /debug/pprof/profile?seconds=N (gzipped pprof)\n\
         heap     live heap (sampled): GET /debug/pprof/heap (gzipped pprof)\n\
         log level: GET or PUT /debug/flags/v (a number 0-10)\n",
    )
        .into_response()
}

fn plain(status: StatusCode, text: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text + "\n",
    )
        .into_response()
}

/// The `seconds` of a CPU profile request: [`DEFAULT_CPU_SECONDS`] when absent, else a whole
/// number from 1 to [`MAX_CPU_SECONDS`].
pub fn cpu_seconds(query: Option<&str>) -> Result<u64, String> {
    let value = query
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.strip_prefix("seconds="))
        .next_back();
    let Some(value) = value else {
        return Ok(DEFAULT_CPU_SECONDS);
    };
    match value.parse::<u64>() {
        Ok(s) if (1..=MAX_CPU_SECONDS).contains(&s) => Ok(s),
        _ => Err(format!(
            "seconds={value:?}: want a whole number of seconds from 1 to {MAX_CPU_SECONDS}"
        )),
    }
}

/// Whether a CPU profile is being taken (the sampler is process-wide).
static CPU_PROFILING: AtomicBool = AtomicBool::new(false);

/// Clears [`CPU_PROFILING`] when the profile ends, also when the request is dropped.
struct CpuProfiling;

impl Drop for CpuProfiling {
    fn drop(&mut self) {
        CPU_PROFILING.store(false, Ordering::Release);
    }
}

async fn cpu_profile(query: Option<String>) -> Response {
    let seconds = match cpu_seconds(query.as_deref()) {
        Ok(s) => s,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    if CPU_PROFILING.swap(true, Ordering::AcqRel) {
        return plain(
            StatusCode::CONFLICT,
            "a CPU profile is being taken already; try again when it ends".to_owned(),
        );
    }
    let _running = CpuProfiling;
    let guard = match pprof::ProfilerGuardBuilder::default()
        .frequency(CPU_SAMPLE_HZ)
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
    {
        Ok(g) => g,
        Err(e) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot start the CPU profiler: {e}"),
            );
        }
    };
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let encoded = guard
        .report()
        .build()
        .and_then(|report| report.pprof())
        .map(|profile| pprof::protos::Message::encode_to_vec(&profile));
    drop(guard);
    match encoded.map_err(|e| e.to_string()).and_then(|b| gzip(&b)) {
        Ok(body) => profile_response(body, "profile"),
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the CPU profile: {e}"),
        ),
    }
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).map_err(|e| e.to_string())?;
    encoder.finish().map_err(|e| e.to_string())
}

fn profile_response(body: Vec<u8>, name: &str) -> Response {
    (
        [
            (header::CONTENT_TYPE, PPROF_CONTENT_TYPE.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

async fn heap_profile() -> Response {
    let Some(ctl) = jemalloc_pprof::PROF_CTL.as_ref() else {
        return plain(
            StatusCode::NOT_IMPLEMENTED,
            "heap profiling is off: this process does not run on jemalloc with its profiler on \
             (serving::heap_profiled!)"
                .to_owned(),
        );
    };
    // The lock: one dump at a time.
    let ctl = ctl.lock().await;
    if !ctl.activated() {
        return plain(
            StatusCode::NOT_IMPLEMENTED,
            "heap profiling is not active in this process".to_owned(),
        );
    }
    let dumped = dump_heap();
    drop(ctl);
    match dumped {
        Ok(body) => profile_response(body, "heap"),
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot dump the heap profile: {e:#}"),
        ),
    }
}

/// jemalloc's heap dump as a gzipped pprof protobuf. jemalloc writes it to a path, which here is
/// a memfd's `/proc/self/fd/N`: no file system is written (the images have none writable).
fn dump_heap() -> anyhow::Result<Vec<u8>> {
    use anyhow::Context as _;
    use std::os::fd::AsRawFd as _;
    let fd = nix::sys::memfd::memfd_create(
        c"captf-heap-profile",
        nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
    )
    .context("memfd_create")?;
    let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
    write_prof_dump(&path)?;
    // jemalloc opened the memfd anew; this descriptor still reads from the start.
    let profile = pprof_util::parse_jeheap(
        BufReader::new(std::fs::File::from(fd)),
        mappings::MAPPINGS.as_deref(),
    )
    .context("reading jemalloc's heap dump")?;
    Ok(profile.to_pprof(("inuse_space", "bytes"), ("space", "bytes"), None))
}

#[allow(unsafe_code)]
fn write_prof_dump(path: &CString) -> anyhow::Result<()> {
    // SAFETY: "prof.dump" is a write-only control taking a C string (jemalloc(3)); `path` outlives
    // the call.
    unsafe { tikv_jemalloc_ctl::raw::write(b"prof.dump\0", path.as_ptr()) }
        .map_err(|e| anyhow::anyhow!("jemalloc prof.dump: {e}"))
}

fn verbosity() -> Response {
    match LOG_LEVEL.get() {
        Some(level) => plain(StatusCode::OK, level.get().to_string()),
        None => no_log_level(),
    }
}

fn no_log_level() -> Response {
    plain(
        StatusCode::NOT_IMPLEMENTED,
        "this process's log level cannot be changed at run time".to_owned(),
    )
}

/// The verbosity a `PUT /debug/flags/v` body asks for: a whole number from 0 to
/// [`MAX_VERBOSITY`], surrounding white space allowed.
pub fn parse_verbosity(body: &[u8]) -> Result<u8, String> {
    let text = std::str::from_utf8(body)
        .map_err(|_| "the body is not text: send a number from 0 to 10".to_owned())?
        .trim();
    match text.parse::<u8>() {
        Ok(v) if v <= MAX_VERBOSITY => Ok(v),
        _ => Err(format!(
            "{text:?} is not a verbosity: send a whole number from 0 to {MAX_VERBOSITY}"
        )),
    }
}

fn set_verbosity(body: &[u8]) -> Response {
    let v = match parse_verbosity(body) {
        Ok(v) => v,
        Err(e) => return plain(StatusCode::BAD_REQUEST, e),
    };
    let Some(level) = LOG_LEVEL.get() else {
        return no_log_level();
    };
    let before = level.get();
    match level.set(v) {
        Ok(()) => {
            tracing::info!(from = before, to = v, "log verbosity changed");
            plain(StatusCode::OK, format!("verbosity set to {v}"))
        }
        Err(e) => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot set verbosity {v}: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_default_and_bounds() {
        assert_eq!(cpu_seconds(None), Ok(DEFAULT_CPU_SECONDS));
        assert_eq!(cpu_seconds(Some("")), Ok(DEFAULT_CPU_SECONDS));
        assert_eq!(cpu_seconds(Some("seconds=5")), Ok(5));
        assert_eq!(cpu_seconds(Some("debug=1&seconds=300")), Ok(300));
        for bad in [
            "seconds=0",
            "seconds=301",
            "seconds=-1",
            "seconds=1.5",
            "seconds=x",
        ] {
            let e = cpu_seconds(Some(bad)).unwrap_err();
            assert!(e.contains("from 1 to 300"), "{bad}: {e}");
        }
    }

    #[test]
    fn verbosity_bodies() {
        assert_eq!(parse_verbosity(b"4"), Ok(4));
        assert_eq!(parse_verbosity(b" 0\n"), Ok(0));
        assert_eq!(parse_verbosity(b"10"), Ok(10));
        for bad in [&b"11"[..], b"-1", b"", b"debug", b"\xff"] {
            assert!(parse_verbosity(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_log_level_keeps_the_old_value_when_applying_fails() {
        let level = LogLevel::new(2, |v| if v == 7 { Err("no".to_owned()) } else { Ok(()) });
        level.set(4).unwrap();
        assert_eq!(level.get(), 4);
        assert!(level.set(7).is_err());
        assert_eq!(level.get(), 4);
        assert!(level.set(11).unwrap_err().contains("above 10"));
        assert_eq!(level.clone().get(), 4, "clones share the value");
    }
}
