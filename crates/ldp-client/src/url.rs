//! Endpoint URLs: `http(s)://` as is, and the RFC §9.2 `ldp://` form (plain HTTP; `ldps://` is
//! HTTPS), reduced to the base every path is appended to.

/// Why a URL is not an LDP endpoint this build can call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// `https://` (or `ldps://`) in a build without the `tls` feature.
    #[error("https:// needs a build with the `tls` feature")]
    NeedsTls,
    /// Not `http://`, `https://`, `ldp://` or `ldps://` (the URL as given).
    #[error("'{0}' must start with http://, https:// or ldp://")]
    Scheme(String),
    /// Nothing between the scheme and the path (the URL as given).
    #[error("'{0}' has no host")]
    NoHost(String),
    /// A query or fragment, which a base URL cannot carry (the URL as given).
    #[error("'{0}' has a query or fragment; a base URL takes neither")]
    Query(String),
    /// Credentials before the host (`user:password@`): never sent, and a URL is shown in too
    /// many places (names, labels, logs) to hold a secret (the URL with them masked).
    #[error("'{0}' carries credentials (user:password@ before the host), which are never sent and would be shown wherever the URL is: give the URL without them")]
    Userinfo(String),
}

/// The base URL of an LDP endpoint: scheme, host, port and any path prefix, without a
/// trailing slash. `ldp://` is read as `http://` and `ldps://` as `https://`; anything else
/// but `http(s)://`, a missing host, credentials (`user:pass@`), a query or a fragment is
/// refused. An error shows the URL with any credentials masked.
///
/// ```
/// assert_eq!(ldp_client::base_url("ldp://127.0.0.1:8080/").unwrap(), "http://127.0.0.1:8080");
/// assert!(ldp_client::base_url("ftp://example.org").is_err());
/// ```
pub fn base_url(url: &str) -> Result<String, UrlError> {
    let url = url.trim();
    let shown = || masked(url);
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| UrlError::Scheme(shown()))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ldp" => "http",
        "https" | "ldps" if cfg!(feature = "tls") => "https",
        "https" | "ldps" => return Err(UrlError::NeedsTls),
        _ => return Err(UrlError::Scheme(shown())),
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(UrlError::NoHost(shown()));
    }
    if authority(rest).contains('@') {
        return Err(UrlError::Userinfo(shown()));
    }
    if rest.contains(['?', '#']) {
        return Err(UrlError::Query(shown()));
    }
    Ok(format!("{scheme}://{}", rest.trim_end_matches('/')))
}

/// What follows `scheme://` up to the path, query or fragment.
fn authority(rest: &str) -> &str {
    rest.find(['/', '?', '#']).map_or(rest, |i| &rest[..i])
}

/// `url` with any credentials before its host replaced by `***` (`http://***@host`), for
/// errors and logs.
pub fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // No scheme: whatever precedes an `@` before the first `/` may be credentials.
        return match authority(url).rfind('@') {
            Some(at) => format!("***{}", &url[at..]),
            None => url.to_owned(),
        };
    };
    match authority(rest).rfind('@') {
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::{base_url, masked, UrlError};

    #[test]
    fn ldp_urls_are_http_and_bases_lose_their_trailing_slash() {
        assert_eq!(base_url("ldp://h:1").unwrap(), "http://h:1");
        assert_eq!(base_url("LDP://h:9/x/").unwrap(), "http://h:9/x");
        assert_eq!(base_url(" http://h:9/ ").unwrap(), "http://h:9");
        for bad in [
            "h:1",
            "ftp://h",
            "http://",
            "http:///x",
            "http://h/?a=1",
            "http://h/#f",
            "",
        ] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
        if !cfg!(feature = "tls") {
            assert_eq!(base_url("ldps://h"), Err(UrlError::NeedsTls));
        }
    }

    #[test]
    fn credentials_are_refused_and_never_shown() {
        for url in [
            "http://user:hunter2@h:1",
            "ldp://user:hunter2@h:1/x",
            "http://hunter2@h",
            "http://a@b:hunter2@h/p",
        ] {
            let e = base_url(url).unwrap_err();
            assert!(matches!(e, UrlError::Userinfo(_)), "{url}: {e:?}");
            let shown = e.to_string();
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("***@h"), "{shown}");
        }
        // Other problems do not show them either.
        let e = base_url("ftp://u:hunter2@h").unwrap_err().to_string();
        assert!(!e.contains("hunter2") && e.contains("ftp://***@h"), "{e}");
        let e = base_url("http://u:hunter2@h/?q").unwrap_err().to_string();
        assert!(!e.contains("hunter2"), "{e}");
        // An `@` in the path is no credential.
        assert_eq!(base_url("http://h:1/a@b").unwrap(), "http://h:1/a@b");
        assert_eq!(masked("http://h/a@b"), "http://h/a@b");
        assert_eq!(masked("u:p@h"), "***@h");
    }

    #[test]
    fn url_problems_keep_their_wording() {
        assert_eq!(
            base_url(" ftp://h ").unwrap_err().to_string(),
            "'ftp://h' must start with http://, https:// or ldp://"
        );
        assert_eq!(
            base_url("http:///x").unwrap_err().to_string(),
            "'http:///x' has no host"
        );
    }
}
