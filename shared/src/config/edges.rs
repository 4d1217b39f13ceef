//! What a browser may do to the API (`api.cors_origins`, `api.public_origin`, `api.allowed_hosts`): origins and
//! host names are read here, once, by the load-time checks and by the API's origin and host checks, so that a
//! value accepted at load is understood the same way on every request.

use std::{fmt, net::IpAddr};

use super::ApiSettings;

/// A web origin: `scheme://host[:port]`, with the scheme's default port left out, as browsers send it in
/// `Origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebOrigin {
    /// `http` or `https`.
    pub scheme: String,
    /// The host, lower case (an IPv6 address in brackets).
    pub host: String,
    /// The port when it is not the scheme's default.
    pub port: Option<u16>,
}

impl WebOrigin {
    /// Reads an origin (`https://scheduler.example.org`, `http://127.0.0.1:8080`); a trailing `/` is allowed,
    /// a path, a query, user information or `*` are not.
    pub fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim().trim_end_matches('/');
        let (scheme, rest) = trimmed.split_once("://").ok_or_else(|| {
            format!("{text:?} is not an origin (scheme://host[:port], such as https://scheduler.example.org)")
        })?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!("{text:?} is not an http or https origin"));
        }
        if rest.is_empty() || rest.contains(['/', '?', '#', '@', '*', ' ']) {
            return Err(format!(
                "{text:?} is not an origin: give scheme://host[:port] only, without a path, a wildcard or user information"
            ));
        }
        let (host, port) = split_host_port(rest).ok_or_else(|| format!("{text:?} has a port that is not a number"))?;
        let default = if scheme == "https" { 443 } else { 80 };
        Ok(Self { scheme, host, port: port.filter(|p| *p != default) })
    }

    /// `host[:port]` as a `Host` header would say it for this origin.
    pub fn authority(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.clone(),
        }
    }

    /// Whether `host_header` (a request's `Host`) names this origin's host and port, whatever the scheme: an API
    /// behind a TLS proxy is reached over http with the https origin's `Host`.
    pub fn matches_host(&self, host_header: &str) -> bool {
        let Some((host, port)) = split_host_port(host_header.trim()) else { return false };
        let port = port.filter(|p| !matches!((self.scheme.as_str(), p), ("http", 80) | ("https", 443)));
        host == self.host && port == self.port
    }
}

impl fmt::Display for WebOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority())
    }
}

/// `host[:port]` → the host in lower case and the port, if any; `None` when the port is not a number.
pub fn split_host_port(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        // [v6]:port
        let (inside, after) = rest.split_once(']')?;
        (format!("[{inside}]"), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok()?),
        None => None,
    };
    Some((host.to_ascii_lowercase(), port))
}

/// Whether `host` (without its port) is `localhost` or a loopback address (127.0.0.0/8, `[::1]`): a name no
/// other site can make a browser send for this API.
pub fn is_loopback_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.ends_with(".localhost") || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// What is wrong with `[api]`'s browser settings, each with its full key.
pub fn api_problems(api: &ApiSettings) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for origin in &api.cors_origins {
        if origin.trim() == "*" {
            problems.push((
                "api.cors_origins".to_owned(),
                "\"*\" is refused: it would let every web site read the API's answers with a visitor's credentials; \
                 list the origins of the pages that call the API (such as \"https://panel.example.org\")"
                    .to_owned(),
            ));
        } else if let Err(e) = WebOrigin::parse(origin) {
            problems.push(("api.cors_origins".to_owned(), e));
        }
    }
    if let Some(origin) = &api.public_origin
        && let Err(e) = WebOrigin::parse(origin)
    {
        problems.push(("api.public_origin".to_owned(), e));
    }
    for host in &api.allowed_hosts {
        let valid = !host.is_empty()
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.[]:".contains(&b))
            && split_host_port(host).is_some_and(|(_, port)| port.is_none() || host.starts_with('['));
        if !valid {
            problems.push((
                "api.allowed_hosts".to_owned(),
                format!("{host:?} is not a host name: give the name only (scheduler.example.org), any port is allowed"),
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_read_with_their_default_ports_left_out() {
        let o = WebOrigin::parse("https://Scheduler.Example.org:443/").expect("an origin");
        assert_eq!(o.to_string(), "https://scheduler.example.org");
        assert!(o.matches_host("scheduler.example.org") && o.matches_host("scheduler.example.org:443"));
        assert!(!o.matches_host("scheduler.example.org:8443") && !o.matches_host("evil.example"));
        let local = WebOrigin::parse("http://127.0.0.1:8080").expect("an origin");
        assert!(local.matches_host("127.0.0.1:8080") && !local.matches_host("127.0.0.1:8081"));
        let v6 = WebOrigin::parse("http://[::1]:8080").expect("an origin");
        assert_eq!(v6.host, "[::1]");
        assert!(v6.matches_host("[::1]:8080"));
        for bad in ["*", "null", "ftp://x", "https://x/path", "https://u@x", "https://x:port", "https://"] {
            assert!(WebOrigin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loopback_hosts_are_localhost_and_loopback_addresses() {
        for host in ["localhost", "127.0.0.1", "127.8.9.10", "[::1]", "app.localhost"] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in ["attacker.example", "10.0.0.1", "localhost.attacker.example", "[::2]", "0.0.0.0"] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
