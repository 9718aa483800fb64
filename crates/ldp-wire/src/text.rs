//! Text cut to a byte bound without splitting a character. Every bounded copy of words from
//! outside (an agent's error message, a span's captured prompt, a ledger field, a client's
//! id in an error) is cut here, once, rather than by a loop over `is_char_boundary` in each
//! room: a cut inside a multi-byte character panics, so the one place it is done is the one
//! place it is tested. What a caller adds to show the cut (an ellipsis, a note, a flag) stays
//! with the caller.

/// The longest prefix of `s` that is at most `max` bytes and ends at a character boundary
/// (`s` itself when it fits). Never panics: a bound inside a character moves back to its
/// start, and `0` gives `""`.
#[inline]
pub fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    // Terminates: offset 0 is always a boundary.
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Shortens `s` in place to [`cut`]`(s, max)`; whether anything was removed (the capacity is
/// kept: shrink it where the string is stored for long).
#[inline]
pub fn truncate(s: &mut String, max: usize) -> bool {
    let kept = cut(s, max).len();
    if kept == s.len() {
        return false;
    }
    s.truncate(kept);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_inside_a_character_moves_back_to_its_start() {
        // 1, 2, 3 and 4 bytes: every bound inside each character.
        let s = "aé€🦀z";
        assert_eq!(s.len(), 11);
        let want = [
            (0, ""),
            (1, "a"),
            (2, "a"),
            (3, "aé"),
            (4, "aé"),
            (5, "aé"),
            (6, "aé€"),
            (7, "aé€"),
            (8, "aé€"),
            (9, "aé€"),
            (10, "aé€🦀"),
            (11, "aé€🦀z"),
        ];
        for (max, kept) in want {
            assert_eq!(cut(s, max), kept, "cut at {max}");
            let mut owned = s.to_owned();
            assert_eq!(
                truncate(&mut owned, max),
                kept.len() < s.len(),
                "truncate at {max}"
            );
            assert_eq!(owned, kept, "truncate at {max}");
        }
    }

    #[test]
    fn text_that_fits_is_kept_whole() {
        assert_eq!(cut("", 0), "");
        assert_eq!(cut("", 8), "");
        // Exactly the bound: nothing removed.
        assert_eq!(cut("héllo", 6), "héllo");
        assert_eq!(cut("héllo", usize::MAX), "héllo");
        let mut s = String::from("héllo");
        assert!(!truncate(&mut s, 6));
        assert_eq!(s, "héllo");
        let mut empty = String::new();
        assert!(!truncate(&mut empty, 0));
    }

    #[test]
    fn a_character_wider_than_the_bound_leaves_nothing() {
        assert_eq!(cut("🦀", 3), "");
        let mut s = String::from("🦀🦀");
        assert!(truncate(&mut s, 3));
        assert_eq!(s, "");
    }
}
