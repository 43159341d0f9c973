//! The runner's own log lines: to stderr (stdout's last line is the result document), text or
//! JSON, structured, and never carrying a value (tfvars, credentials, plan output): only step
//! names, flags with backend values reduced to keys, variable names, paths, counts and hashes.

use tracing::level_filters::LevelFilter;

use crate::cli::{LogFormat, LoggingFlags};

/// Installs the subscriber. Verbosity 0 logs progress (info), 1-3 debug, 4 and above trace.
pub fn init(flags: &LoggingFlags) {
    let level = match flags.verbosity {
        0 => LevelFilter::INFO,
        1..=3 => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    // Only the runner's own modules log at the chosen level; libraries stay at warn.
    let filter = tracing_subscriber::filter::Targets::new()
        .with_default(LevelFilter::WARN.min(level))
        .with_target("runner", level);
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(true);
    let result = match flags.logging_format {
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .finish()
            .with(filter)
            .try_init(),
        LogFormat::Text => builder.finish().with(filter).try_init(),
    };
    let _ = result;
}

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
