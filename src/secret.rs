//! Secrets: the never-shown [`Secret`] (from `ldp-client`, which signs with it), key hashing
//! and constant-time comparison, and redaction of passwords in URLs.

pub use ldp_client::Secret;

/// Constant-time equality of two byte strings (length is not hidden).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// SHA-256 of `key`, lower-case hex: how API keys are stored (`ldp-gateway hash-key`).
pub fn hash_key(key: &str) -> String {
    with_key_hash(key, str::to_owned)
}

/// `f` of [`hash_key`]`(key)`, written on the stack (a request's key is looked up without
/// allocating).
pub fn with_key_hash<R>(key: &str, f: impl FnOnce(&str) -> R) -> R {
    use sha2::{Digest, Sha256};
    let mut hex = [0u8; 64];
    // 32 bytes always fit 64 hex digits, which are ASCII.
    let _ = hex::encode_to_slice(Sha256::digest(key.trim().as_bytes()), &mut hex);
    f(std::str::from_utf8(&hex).unwrap_or_default())
}

/// `url` without its password (for errors and logs): the userinfo password, a `password=`
/// query parameter or libpq `key=value` entry.
pub fn redact_url(url: &str) -> String {
    let mut out = redact_userinfo(url);
    let mut from = 0;
    while let Some(i) = out[from..].find("password=") {
        let start = from + i + "password=".len();
        let end = out[start..]
            .find(['&', ' '])
            .map_or(out.len(), |e| start + e);
        out.replace_range(start..end, "***");
        from = start + 3;
    }
    out
}

fn redact_userinfo(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let userinfo = &url[s + 3..at];
            match userinfo.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_prints_its_value() {
        let s = Secret::new("sk-CANARY-42");
        assert!(!format!("{s:?} {s}").contains("CANARY"));
        assert_eq!(s.expose(), b"sk-CANARY-42");
    }

    #[test]
    fn hashes_keys_as_hex_sha256() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(constant_time_eq(b"a", b"a") && !constant_time_eq(b"a", b"b"));
    }
}
