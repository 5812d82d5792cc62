//! The message of a caught panic, for a log line or an entry's error: actors and handlers
//! catch panics and carry on, so the message is all that is left of one.

use std::any::Any;

/// The text a panic was raised with (`panic!("...")`'s), or a fixed text for other payloads.
pub fn message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_of_text_and_others() {
        assert_eq!(message(&"static"), "static");
        assert_eq!(message(&String::from("owned")), "owned");
        assert_eq!(message(&42u8), "(no message)");
    }
}
