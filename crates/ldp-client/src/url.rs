//! Endpoint URLs: `http(s)://` as is, and the RFC §9.2 `ldp://` form (plain HTTP; `ldps://` is
//! HTTPS), reduced to the base every path is appended to.

use crate::Error;

/// The base URL of an LDP endpoint: scheme, host, port and any path prefix, without a
/// trailing slash. Accepts `http://`, `https://`, `ldp://` (read as `http://`) and `ldps://`
/// (read as `https://`); refuses anything else, a missing host, a query or a fragment.
///
/// ```
/// assert_eq!(ldp_client::base_url("ldp://127.0.0.1:8080/").unwrap(), "http://127.0.0.1:8080");
/// assert!(ldp_client::base_url("ftp://example.org").is_err());
/// ```
pub fn base_url(url: &str) -> Result<String, Error> {
    let bad = |reason: &str| Error::Url {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let given = url.trim();
    let (scheme, rest) = given
        .split_once("://")
        .ok_or_else(|| bad("no scheme (http://, https://, ldp:// or ldps://)"))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" | "ldp" => "http",
        "https" | "ldps" => "https",
        _ => return Err(bad("the scheme must be http, https, ldp or ldps")),
    };
    let parsed = reqwest::Url::parse(&format!("{scheme}://{rest}")).map_err(|e| Error::Url {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad("a base URL takes no query or fragment"));
    }
    Ok(parsed.as_str().trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::base_url;

    #[test]
    fn ldp_urls_are_http_and_bases_lose_their_trailing_slash() {
        assert_eq!(base_url("ldp://h:1").unwrap(), "http://h:1");
        assert_eq!(base_url("LDPS://h/x/").unwrap(), "https://h/x");
        assert_eq!(base_url(" http://h:9/ ").unwrap(), "http://h:9");
        for bad in [
            "h:1",
            "ftp://h",
            "http://",
            "http://h/?a=1",
            "http://h/#f",
            "",
        ] {
            assert!(base_url(bad).is_err(), "{bad}");
        }
    }
}
