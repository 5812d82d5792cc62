//! The one place that decides whether a failure is an outage or the event's fault.
//!
//! An outage (Redis unreachable, slow, loading, read-only, out of memory) is nobody's fault:
//! it consumes no attempt, the relay backs off and reports not-ready. Anything else the server
//! refuses for a particular event (WRONGTYPE, a bad argument) is that event's fault: it is
//! retried with backoff and dead-lettered after `retry.max_attempts`.

use redis::RedisError;

/// The verdict on a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not the event's fault: back off, burn no attempt.
    Outage,
    /// The event's fault: count an attempt.
    EventFault,
}

/// Error codes (the first word of a Redis error reply) that mean the server, not the event,
/// is the problem.
const OUTAGE_CODES: &[&str] = &[
    "LOADING",
    "BUSY",
    "OOM",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
    "NOSCRIPT",
    "MOVED",
    "ASK",
];

/// Classifies an error reply's text, e.g. `WRONGTYPE Operation against a key ...`.
pub fn classify_reply(message: &str) -> Verdict {
    let code = message.split_whitespace().next().unwrap_or("");
    if OUTAGE_CODES.contains(&code) {
        Verdict::Outage
    } else {
        Verdict::EventFault
    }
}

/// Classifies an error of a whole command.
pub fn classify_error(error: &RedisError) -> Verdict {
    if error.is_io_error()
        || error.is_timeout()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_unrecoverable_error()
    {
        return Verdict::Outage;
    }
    match error.code() {
        Some(code) => classify_reply(code),
        // No server code: a client-side failure (parse, protocol). Assume the connection,
        // not the event: burning attempts on a client bug would dead-letter good events.
        None => Verdict::Outage,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrongtype_is_the_events_fault() {
        assert_eq!(
            classify_reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
            Verdict::EventFault
        );
        assert_eq!(classify_reply("ERR syntax error"), Verdict::EventFault);
    }

    #[test]
    fn server_trouble_is_an_outage() {
        for msg in [
            "LOADING Redis is loading the dataset in memory",
            "OOM command not allowed when used memory > 'maxmemory'",
            "READONLY You can't write against a read only replica.",
            "BUSY Redis is busy running a script",
        ] {
            assert_eq!(classify_reply(msg), Verdict::Outage, "{msg}");
        }
    }

    #[test]
    fn io_errors_are_outages() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = RedisError::from(io);
        assert_eq!(classify_error(&err), Verdict::Outage);
        let broken = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "broken pipe");
        assert_eq!(classify_error(&RedisError::from(broken)), Verdict::Outage);
    }
}
