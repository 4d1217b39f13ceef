//! Names that reach audit trails and logs (token names, people named by an identity provider or a proxy): a
//! character that reorders or hides text when displayed (bidi controls such as U+202E, zero-width and other
//! format characters, control characters) would let a name read as another in the panel or a terminal, so such
//! characters are refused where a name is chosen (a token) and removed where it is reported (a person).

/// Whether `c` must never appear in a name: a control character, a bidirectional control (U+200E/F,
/// U+202A–U+202E, U+2066–U+2069, U+061C), or another invisible format character (zero-width space and joiners,
/// the word joiner, the byte-order mark, soft hyphen).
pub fn is_unsafe_in_name(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{2069}' | '\u{206A}'..='\u{206F}' | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}')
}

/// The first unsafe character of `name`, if any (for a sentence that names it).
pub fn unsafe_char(name: &str) -> Option<char> {
    name.chars().find(|c| is_unsafe_in_name(*c))
}

/// `text` without its unsafe characters, at most `max` characters, trimmed: a name reported by someone else (an
/// identity provider, a proxy) is kept readable rather than refused, since the person cannot change it.
pub fn clean_name(text: &str, max: usize) -> String {
    text.chars().filter(|c| !is_unsafe_in_name(*c)).take(max).collect::<String>().trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_format_and_control_characters_are_unsafe_and_removed() {
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200E}', '\u{200F}', '\u{200B}', '\n', '\u{7}'] {
            assert!(is_unsafe_in_name(c), "{c:?}");
        }
        for c in ['a', 'é', 'ß', '李', ' ', '-', '@', '.'] {
            assert!(!is_unsafe_in_name(c), "{c:?}");
        }
        assert_eq!(clean_name(" ada\u{202E}nimda\u{2069} ", 100), "adanimda");
        assert_eq!(clean_name("abcdef", 3), "abc");
        assert_eq!(unsafe_char("ok\u{2067}no"), Some('\u{2067}'));
        assert_eq!(unsafe_char("Ada Lovelace"), None);
    }
}
