//! Pretty-printing of the API's JSON without reordering it: the text is re-indented token by token, so keys stay
//! in the order the API wrote them (parsing into a map would sort them).

/// `text` (valid JSON) indented by two spaces per level. Strings, numbers and key order are left untouched.
pub fn pretty(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = text.trim().chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|n| n.is_whitespace()) {
                    chars.next();
                }
                if chars.peek().is_some_and(|&n| n == '}' || n == ']') {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
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
    use serde_json::Value;

    use super::*;

    #[test]
    fn indents_without_reordering_or_touching_strings() {
        let text = r#"{"z":1,"a":[1,{"k":"a, b: {c}","e":"\"q\\"}],"empty":{},"none":[ ]}"#;
        let pretty = pretty(text);
        assert_eq!(
            pretty,
            "{\n  \"z\": 1,\n  \"a\": [\n    1,\n    {\n      \"k\": \"a, b: {c}\",\n      \"e\": \"\\\"q\\\\\"\n    }\n  ],\n  \"empty\": {},\n  \"none\": []\n}"
        );
        let before: Value = serde_json::from_str(text).expect("json");
        let after: Value = serde_json::from_str(&pretty).expect("still json");
        assert_eq!(before, after);
    }
}
