//! Indents JSON text for the event page without parsing its values: a number Postgres keeps
//! and `f64` does not (`1e400`, `1e-400`) is shown as stored, where a round trip through
//! `serde_json::Value` would show infinity's refusal or `0.0`.

/// `json` (valid JSON text, as Postgres prints `jsonb`) indented by two spaces per level.
pub fn indent(json: &str) -> String {
    let mut out = String::with_capacity(json.len() * 2);
    let mut depth = 0usize;
    let mut chars = json.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                while let Some(s) = chars.next() {
                    out.push(s);
                    match s {
                        '\\' => out.extend(chars.next()),
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                match chars.peek() {
                    Some('}' | ']') => out.extend(chars.next()),
                    _ => {
                        depth += 1;
                        newline(&mut out, depth);
                    }
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::indent;

    #[test]
    fn indents_like_serde_and_keeps_every_digit() {
        let stored = r#"{"a": [1, {"b": "x, {y}: \"z\""}], "e": {}, "f": [], "n": 1e400}"#;
        assert_eq!(
            indent(stored),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": \"x, {y}: \\\"z\\\"\"\n    }\n  ],\n  \
             \"e\": {},\n  \"f\": [],\n  \"n\": 1e400\n}"
        );
        let v = serde_json::json!({"k": [true, null, "é\\n"], "s": "a\\\\b"});
        assert_eq!(
            indent(&v.to_string()),
            serde_json::to_string_pretty(&v).expect("json")
        );
        assert_eq!(indent("\"plain\""), "\"plain\"");
        assert_eq!(indent("0.00000000000000000001"), "0.00000000000000000001");
    }
}
