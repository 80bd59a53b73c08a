//! The hosts a sandboxed command may reach through the proxy (`--sandbox-allow-net`): what a
//! pattern may be, and whether a host a request names matches one.
//!
//! A pattern is a host name (`registry.npmjs.org`), `*.` and a domain for any name strictly
//! beneath it (`*.pythonhosted.org`: `files.pythonhosted.org`, not `pythonhosted.org`), or an IP
//! address written out (`127.0.0.1`, `::1`). Names compare without case and without one trailing
//! dot; addresses compare as addresses, so `::1` also matches `0:0:0:0:0:0:0:1`. A name never
//! matches an address: allowing a name does not allow what it resolves to.

use std::fmt;
use std::net::IpAddr;

/// One allowed host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name (lowercase, no trailing dot).
    Name(String),
    /// Any name ending in `.` and this domain.
    Beneath(String),
    /// This address.
    Address(IpAddr),
}

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PatternError(String);

impl HostPattern {
    /// The pattern `text` (as an operator writes it).
    pub fn parse(text: &str) -> Result<HostPattern, PatternError> {
        let refuse = |why: &str| PatternError(format!("{text:?}: {why}"));
        if text.contains("://") || text.contains('/') {
            return Err(refuse(
                "expected a host name such as registry.npmjs.org, not a URL",
            ));
        }
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(address) = bare.parse::<IpAddr>() {
            return Ok(HostPattern::Address(address));
        }
        if let Some(domain) = text.strip_prefix("*.") {
            let domain = name(domain).ok_or_else(|| {
                refuse("expected *. and a domain name, such as *.pythonhosted.org")
            })?;
            return Ok(HostPattern::Beneath(domain));
        }
        if text.contains(':') {
            return Err(refuse(
                "expected a host name without a port (every port of an allowed host is allowed)",
            ));
        }
        name(text).map(HostPattern::Name).ok_or_else(|| {
            refuse(
                "expected a host name such as registry.npmjs.org, *. and a domain, or an IP \
                 address",
            )
        })
    }

    /// Whether `host`, as a request names it (a name, or an address with IPv6 in brackets),
    /// is allowed by this pattern.
    pub fn allows(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Name(allowed), Host::Name(name)) => allowed == name,
            (HostPattern::Beneath(domain), Host::Name(name)) => name
                .strip_suffix(domain.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
            (HostPattern::Address(allowed), Host::Address(address)) => allowed == address,
            _ => false,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostPattern::Name(name) => f.write_str(name),
            HostPattern::Beneath(domain) => write!(f, "*.{domain}"),
            HostPattern::Address(address) => write!(f, "{address}"),
        }
    }
}

/// A host a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name, lowercase, without a trailing dot.
    Name(String),
    /// An address.
    Address(IpAddr),
}

impl Host {
    /// The host of a request target: a name, an IPv4 address, or an IPv6 address in brackets.
    pub fn parse(text: &str) -> Option<Host> {
        if let Some(inner) = text.strip_prefix('[') {
            let inner = inner.strip_suffix(']')?;
            return match inner.parse::<IpAddr>() {
                Ok(IpAddr::V6(v6)) => Some(Host::Address(IpAddr::V6(v6))),
                _ => None,
            };
        }
        if let Ok(address) = text.parse::<std::net::Ipv4Addr>() {
            return Some(Host::Address(IpAddr::V4(address)));
        }
        name(text).map(Host::Name)
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Address(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Address(address) => write!(f, "{address}"),
        }
    }
}

/// `text` as a host name (lowercase, one trailing dot dropped), if it is one: labels of
/// letters, digits, `-` and `_` (which DNS allows and some hosts use), none empty, none
/// starting or ending with `-`, at most 253 characters.
fn name(text: &str) -> Option<String> {
    let text = text.strip_suffix('.').unwrap_or(text);
    if text.is_empty() || text.len() > 253 {
        return None;
    }
    let valid_label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !text.split('.').all(valid_label) {
        return None;
    }
    // All digits and dots is an address written oddly (`127.1`), never a name.
    if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    Some(text.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(pattern: &str, host: &str) -> bool {
        let host = Host::parse(host).unwrap_or_else(|| panic!("{host} is no host"));
        HostPattern::parse(pattern).unwrap().allows(&host)
    }

    #[test]
    fn patterns_are_names_domains_or_addresses() {
        assert_eq!(
            HostPattern::parse("Registry.NPMJS.org.").unwrap(),
            HostPattern::Name("registry.npmjs.org".into())
        );
        assert_eq!(
            HostPattern::parse("*.pythonhosted.org")
                .unwrap()
                .to_string(),
            "*.pythonhosted.org"
        );
        assert_eq!(HostPattern::parse("[::1]").unwrap().to_string(), "::1");
        for bad in [
            "",
            "*",
            "*.",
            "https://x.org",
            "x.org/simple",
            "x.org:443",
            "a b",
            "exa_mple..com",
            "-x.org",
            "x-.org",
            "*.*.x.org",
            "a.*.x.org",
            "127.1",
            "ünïcode.org",
        ] {
            let err = HostPattern::parse(bad).expect_err(bad);
            assert!(err.to_string().starts_with(&format!("{bad:?}: ")), "{err}");
        }
    }

    #[test]
    fn a_host_matches_exactly_or_strictly_beneath() {
        assert!(allowed("localhost", "LOCALHOST."));
        assert!(allowed("x.org", "x.org"));
        assert!(!allowed("x.org", "a.x.org"));
        assert!(!allowed("x.org", "evilx.org"));
        assert!(!allowed("x.org", "x.org.evil.test"));
        assert!(allowed("*.x.org", "a.x.org"));
        assert!(allowed("*.x.org", "a.b.x.org"));
        assert!(!allowed("*.x.org", "x.org"));
        assert!(!allowed("*.x.org", "evilx.org"));
        assert!(allowed("127.0.0.1", "127.0.0.1"));
        assert!(!allowed("127.0.0.1", "127.0.0.2"));
        assert!(allowed("::1", "[0:0:0:0:0:0:0:1]"));
        // A name never stands for an address, nor an address for a name.
        assert!(!allowed("localhost", "127.0.0.1"));
        assert!(!allowed("127.0.0.1", "localhost"));
    }

    #[test]
    fn hosts_a_request_cannot_name() {
        for bad in [
            "",
            "localhost@127.0.0.2",
            "127.0.0.2#localhost",
            "::1",
            "[127.0.0.1]",
            "[::1",
            "a b",
            "x..org",
            "127.1",
        ] {
            assert_eq!(Host::parse(bad), None, "{bad}");
        }
        assert_eq!(Host::parse("[::1]").unwrap().to_string(), "[::1]");
        assert_eq!(
            Host::parse("Example.ORG.").unwrap().to_string(),
            "example.org"
        );
    }
}
