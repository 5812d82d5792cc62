//! `[log]`: how log lines are written. The level is not here: it is `RUST_LOG`'s (tracing's
//! env filter), default `info`.

use serde::{Deserialize, Serialize};

/// Log settings. The level is `RUST_LOG`'s (tracing's env filter), default `info`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// `text` (for a terminal) or `json` (one object per line, for a log pipeline).
    pub format: LogFormat,
}

/// The shape of a log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines, colored on a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `message`, the event's
    /// fields, and the spans it happened in.
    Json,
}
