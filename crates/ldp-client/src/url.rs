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
}

/// The base URL of an LDP endpoint: scheme, host, port and any path prefix, without a
/// trailing slash. `ldp://` is read as `http://` and `ldps://` as `https://`; anything else
/// but `http(s)://`, a missing host, a query or a fragment is refused.
///
/// ```
/// assert_eq!(ldp_client::base_url("ldp://127.0.0.1:8080/").unwrap(), "http://127.0.0.1:8080");
/// assert!(ldp_client::base_url("ftp://example.org").is_err());
/// ```
pub fn base_url(url: &str) -> Result<String, UrlError> {
    let url = url.trim();
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| UrlError::Scheme(url.to_owned()))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ldp" => "http",
        "https" | "ldps" if cfg!(feature = "tls") => "https",
        "https" | "ldps" => return Err(UrlError::NeedsTls),
        _ => return Err(UrlError::Scheme(url.to_owned())),
    };
    if rest.is_empty() || rest.starts_with('/') {
        return Err(UrlError::NoHost(url.to_owned()));
    }
    if rest.contains(['?', '#']) {
        return Err(UrlError::Query(url.to_owned()));
    }
    Ok(format!("{scheme}://{}", rest.trim_end_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::{base_url, UrlError};

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
