//! The proxy the host's own environment names (`https_proxy`, `http_proxy`, `all_proxy` and
//! `no_proxy`, as curl reads them), through which the sandbox proxy ([`super::proxy`]) reaches
//! an allowed host where the machine has no direct way out: a tunnel (`CONNECT`) through it
//! for every connection, plain-HTTP requests included.
//!
//! Only an `http://` proxy can be gone through; any other scheme refuses to start
//! ([`Upstreams::from_env`]), rather than connect directly where the operator's environment
//! says not to.

use std::fmt;
use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::allow_net::Host;

/// The port of a proxy whose URL names none (as curl takes it).
const DEFAULT_PORT: u16 = 1080;

/// The proxies of the host's environment, by what they carry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Upstreams {
    /// For tunnels a command asks for (`CONNECT`): `https_proxy`, else `all_proxy`.
    pub tunnels: Option<Upstream>,
    /// For a command's plain-HTTP requests: `http_proxy`, else `all_proxy`.
    pub plain: Option<Upstream>,
    /// The hosts reached directly (`no_proxy`).
    direct: Vec<Direct>,
    /// `no_proxy` as set, for the doctor.
    pub no_proxy: Option<String>,
}

/// One proxy.
#[derive(Clone, PartialEq, Eq)]
pub struct Upstream {
    host: Host,
    port: u16,
    /// The `Proxy-Authorization` value of the URL's user and password.
    authorization: Option<String>,
    /// Where it was named, for messages (`HTTPS_PROXY=http://proxy:3128`, its user name and
    /// password shown as `***`: a token may be either).
    pub named: String,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The credentials stay out of logs.
        f.write_str(&self.named)
    }
}

/// A `no_proxy` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Direct {
    /// `*`: every host.
    Every,
    /// A name and every name beneath it (lowercase, no leading dot).
    Name(String),
    /// An address, or a network (`10.0.0.0/8`).
    Network(IpAddr, u8),
}

impl Upstreams {
    /// The proxies `var` names (the host's environment, each variable looked up lowercase
    /// first, as curl does; an empty value is none). A value that is not an `http://` proxy, or
    /// not text, is an error naming the variable; `all_proxy` is read only where one of the
    /// others is missing.
    pub fn from_env(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Upstreams, String> {
        let read = |names: &[&'static str]| -> Result<Option<(&'static str, String)>, String> {
            for name in names {
                match var(name).map(|value| value.into_string()) {
                    None => {}
                    Some(Err(_)) => {
                        return Err(format!("{name} in the host's environment is not text"));
                    }
                    Some(Ok(value)) if value.trim().is_empty() => {}
                    Some(Ok(value)) => return Ok(Some((*name, value.trim().to_string()))),
                }
            }
            Ok(None)
        };
        let upstream = |names: &[&'static str]| -> Result<Option<Upstream>, String> {
            read(names)?
                .map(|(name, value)| Upstream::parse(name, &value))
                .transpose()
        };
        let tunnels = upstream(&["https_proxy", "HTTPS_PROXY"])?;
        // Not `HTTP_PROXY`: a CGI program gets that from a request's `Proxy` header.
        let plain = upstream(&["http_proxy"])?;
        let every = match tunnels.is_none() || plain.is_none() {
            true => upstream(&["all_proxy", "ALL_PROXY"])?,
            false => None,
        };
        let no_proxy = read(&["no_proxy", "NO_PROXY"])?.map(|(_, value)| value);
        let direct = match no_proxy.as_deref() {
            // Every host, where that is the whole value (as curl reads it).
            Some("*") => vec![Direct::Every],
            Some(list) => list
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter_map(Direct::parse)
                .collect(),
            None => Vec::new(),
        };
        Ok(Upstreams {
            tunnels: tunnels.or_else(|| every.clone()),
            plain: plain.or(every),
            direct,
            no_proxy,
        })
    }

    /// The proxy to go through to `host`: for a tunnel, or a plain-HTTP request; none where
    /// the host is reached directly.
    pub fn for_host(&self, tunnel: bool, host: &Host) -> Option<&Upstream> {
        if self.direct.iter().any(|entry| entry.covers(host)) {
            return None;
        }
        match tunnel {
            true => self.tunnels.as_ref(),
            false => self.plain.as_ref(),
        }
    }
}

impl Upstream {
    /// `http://[user[:password]@]host[:port][/]` (the scheme may be left out), named by
    /// `variable`.
    fn parse(variable: &str, url: &str) -> Result<Upstream, String> {
        let refuse = |why: &str| {
            format!(
                "{variable} in the host's environment is {}: {why} (the sandbox proxy goes \
                 through an http:// proxy only; set {variable} to one, or unset it for dsh-host)",
                hidden(url)
            )
        };
        let rest = match url.find("://") {
            Some(end) if url[..end].eq_ignore_ascii_case("http") => &url[end + 3..],
            Some(end) => return Err(refuse(&format!("a {} proxy", &url[..end]))),
            None => url,
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(refuse("a proxy URL has no path"));
        }
        let (user, authority) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let split = match authority.rfind(':') {
            Some(colon) if !authority[colon..].contains(']') => Some(colon),
            _ => None,
        };
        let (host, port) = match split {
            Some(colon) => (
                &authority[..colon],
                authority[colon + 1..]
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p != 0)
                    .ok_or_else(|| refuse("expected a port from 1 to 65535"))?,
            ),
            None => (authority, DEFAULT_PORT),
        };
        let host = Host::parse(host).ok_or_else(|| refuse("expected a host name or an address"))?;
        let authorization = user.map(|user| {
            let (name, password) = user.split_once(':').unwrap_or((user, ""));
            let pair = [
                percent_decoded(name),
                b":".to_vec(),
                percent_decoded(password),
            ]
            .concat();
            format!("Basic {}", STANDARD.encode(&pair))
        });
        Ok(Upstream {
            host,
            port,
            authorization,
            named: format!("{variable}={}", hidden(url)),
        })
    }

    /// Where the proxy is: its host and port.
    pub(crate) fn host(&self) -> (&Host, u16) {
        (&self.host, self.port)
    }

    /// A tunnel through this proxy, reached at `stream`, to `target` (`host:port`): the
    /// connection, and what the proxy sent after its answer's head (the far end's first bytes),
    /// once it answered `2xx`.
    pub(crate) async fn tunnel(
        &self,
        mut stream: TcpStream,
        target: &str,
    ) -> Result<(TcpStream, Vec<u8>), Refused> {
        let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some(authorization) = &self.authorization {
            head.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
        }
        head.push_str("\r\n");
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|err| Refused::Unreachable(self.named.clone(), err))?;
        let (answer, early) = match super::proxy::read_head_after(&mut stream, Vec::new()).await {
            Ok(super::proxy::Head::Whole(answer, early)) => (answer, early),
            Ok(super::proxy::Head::Unread(_)) => {
                return Err(Refused::Answered(
                    self.named.clone(),
                    "no answer it could read".into(),
                ));
            }
            Err(err) => return Err(Refused::Unreachable(self.named.clone(), err)),
        };
        let line = String::from_utf8_lossy(answer.split(|&b| b == b'\r').next().unwrap_or(&[]))
            .into_owned();
        let mut words = line.split(' ');
        match (words.next(), words.next()) {
            (Some("HTTP/1.1" | "HTTP/1.0"), Some(status))
                if status.len() == 3
                    && status.starts_with('2')
                    && status.bytes().all(|b| b.is_ascii_digit()) =>
            {
                Ok((stream, early))
            }
            _ => Err(Refused::Answered(self.named.clone(), line)),
        }
    }
}

/// Why a tunnel through the host's proxy did not open.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The proxy (named) could not be reached.
    Unreachable(String, std::io::Error),
    /// It answered this (its status line) rather than open the tunnel.
    Answered(String, String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Unreachable(named, err) => write!(f, "the host's proxy ({named}): {err}"),
            Refused::Answered(named, line) => {
                write!(f, "the host's proxy ({named}) answered {line:?}")
            }
        }
    }
}

impl Direct {
    /// One entry: a name (a leading `.` or `*.` meaning the same: it and the names beneath it),
    /// an address or a network (`10.0.0.0/8`), a port after either left out (the entry covers
    /// every port). An entry that is none of these covers nothing.
    fn parse(entry: &str) -> Option<Direct> {
        let entry = entry.trim();
        let entry = entry
            .strip_prefix("*.")
            .or_else(|| entry.strip_prefix('.'))
            .unwrap_or(entry);
        if entry.is_empty() {
            return None;
        }
        // `[::1]` and `[::1]:8080`.
        if let Some(inner) = entry.strip_prefix('[') {
            let (address, _) = inner.split_once(']')?;
            let address = address.parse::<IpAddr>().ok()?;
            let most = if address.is_ipv4() { 32 } else { 128 };
            return Some(Direct::Network(address, most));
        }
        let (address, bits) = match entry.split_once('/') {
            Some((address, bits)) => (address, Some(bits.parse::<u8>().ok()?)),
            None => (entry, None),
        };
        if let Ok(address) = address.parse::<IpAddr>() {
            let most = if address.is_ipv4() { 32 } else { 128 };
            return match bits.unwrap_or(most) {
                bits if bits <= most => Some(Direct::Network(address, bits)),
                _ => None,
            };
        }
        if bits.is_some() {
            return None;
        }
        // `10.0.0.1:8080`.
        if let Some((address, port)) = entry.rsplit_once(':')
            && port.bytes().all(|b| b.is_ascii_digit())
            && let Ok(address) = address.parse::<std::net::Ipv4Addr>()
        {
            return Some(Direct::Network(IpAddr::V4(address), 32));
        }
        // A name, without a port.
        let name = match entry.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => entry,
        };
        Some(Direct::Name(
            name.trim_end_matches('.').to_ascii_lowercase(),
        ))
    }

    fn covers(&self, host: &Host) -> bool {
        match (self, host) {
            (Direct::Every, _) => true,
            (Direct::Name(entry), Host::Name(name)) => {
                name == entry
                    || name
                        .strip_suffix(entry.as_str())
                        .is_some_and(|s| s.ends_with('.'))
            }
            (Direct::Network(network, bits), Host::Address(address)) => {
                within(*address, *network, *bits)
            }
            _ => false,
        }
    }
}

/// Whether `address` is in the network of `bits` leading bits of `network`.
fn within(address: IpAddr, network: IpAddr, bits: u8) -> bool {
    let (address, network, width) = match (address.to_canonical(), network.to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u128::from(a.to_bits()), u128::from(n.to_bits()), 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (a.to_bits(), n.to_bits(), 128),
        _ => return false,
    };
    let bits = u32::from(bits).min(width);
    let shift = width - bits;
    bits == 0 || (address >> shift) == (network >> shift)
}

/// `url` with its user name and password replaced by `***`.
fn hidden(url: &str) -> String {
    let start = url.find("://").map_or(0, |end| end + 3);
    match url[start..].rfind('@') {
        Some(at) => format!("{}***{}", &url[..start], &url[start + at..]),
        None => url.to_string(),
    }
}

/// `text` with its `%XX` escapes decoded (a user name or password in a URL), as bytes.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<Upstreams, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Upstreams::from_env(move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.into()))
    }

    fn name(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn proxies_are_read_as_curl_reads_them() {
        let none = env(&[]).unwrap();
        assert_eq!(none, Upstreams::default());
        let up = env(&[
            ("HTTPS_PROXY", "http://u%40x:p%3Aw@proxy.corp:3128/"),
            ("http_proxy", "plain.corp"),
            ("HTTP_PROXY", "http://ignored:1"),
        ])
        .unwrap();
        let tunnels = up.tunnels.clone().unwrap();
        assert_eq!(tunnels.host, name("proxy.corp"));
        assert_eq!(tunnels.port, 3128);
        assert_eq!(tunnels.authorization.as_deref(), Some("Basic dUB4OnA6dw=="));
        assert_eq!(tunnels.named, "HTTPS_PROXY=http://***@proxy.corp:3128/");
        assert!(!format!("{tunnels:?}").contains("p%3Aw"));
        let token = env(&[("all_proxy", "http://TOKEN@p:1")]).unwrap();
        assert_eq!(token.plain.unwrap().named, "all_proxy=http://***@p:1");
        // A password that is no UTF-8 goes as its bytes.
        let latin = env(&[("https_proxy", "http://u:%E9@p:1")]).unwrap();
        assert_eq!(
            latin.tunnels.unwrap().authorization.as_deref(),
            Some("Basic dTrp")
        );
        // all_proxy is not read where both others are set: a desktop's socks:// there is fine.
        let both = env(&[
            ("https_proxy", "http://a:1"),
            ("http_proxy", "http://b:1"),
            ("all_proxy", "socks://s:1080"),
        ]);
        assert!(both.is_ok(), "{both:?}");
        let plain = up.plain.clone().unwrap();
        assert_eq!((plain.host.clone(), plain.port), (name("plain.corp"), 1080));
        // Lowercase first; all_proxy where the other is missing; empty is none.
        let up = env(&[
            ("https_proxy", "http://lower:1"),
            ("HTTPS_PROXY", "http://upper:2"),
            ("ALL_PROXY", "http://every:3"),
            ("http_proxy", " "),
        ])
        .unwrap();
        assert_eq!(up.tunnels.unwrap().host, name("lower"));
        assert_eq!(up.plain.unwrap().host, name("every"));
        assert_eq!(
            env(&[("all_proxy", "http://[::1]:8080")])
                .unwrap()
                .tunnels
                .map(|u| (u.host, u.port)),
            Some((name("[::1]"), 8080))
        );
    }

    #[test]
    fn a_proxy_that_cannot_be_gone_through_is_an_error_naming_its_variable() {
        for (var, value, says) in [
            ("ALL_PROXY", "socks5://u:secret@s:1080", "a socks5 proxy"),
            ("https_proxy", "https://p:443", "a https proxy"),
            ("HTTPS_PROXY", "http://p:0", "port"),
            ("HTTPS_PROXY", "http://p/path", "no path"),
            ("http_proxy", "http://", "host name"),
        ] {
            let err = env(&[(var, value)]).unwrap_err();
            assert!(
                err.starts_with(&format!("{var} in the host's environment")),
                "{err}"
            );
            assert!(err.contains(says), "{err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[test]
    fn no_proxy_names_hosts_beneath_domains_and_networks() {
        let up = env(&[
            ("https_proxy", "http://p:1"),
            (
                "no_proxy",
                "localhost, .Internal.Corp *.dev.corp,10.0.0.0/8,::1,host:8080,[::3]:80,\
                 1.2.3.4:80,5.6.7.8/40,bad/x",
            ),
        ])
        .unwrap();
        for direct in [
            "localhost",
            "internal.corp",
            "a.internal.corp",
            "b.dev.corp",
            "dev.corp",
            "10.2.3.4",
            "[::1]",
            "host",
            "[::3]",
            "1.2.3.4",
        ] {
            assert!(up.for_host(true, &name(direct)).is_none(), "{direct}");
        }
        for through in [
            "5.6.7.8",
            "bad",
            "xlocalhost",
            "internal.corp.evil",
            "11.0.0.1",
            "[::2]",
            "corp",
        ] {
            assert!(up.for_host(true, &name(through)).is_some(), "{through}");
        }
        // No plain-HTTP proxy named: plain requests go directly.
        assert!(up.for_host(false, &name("example.com")).is_none());
        let every = env(&[("all_proxy", "http://p:1"), ("NO_PROXY", " * ")]).unwrap();
        assert!(every.for_host(true, &name("example.com")).is_none());
        // `*` among others is no entry.
        let listed = env(&[("all_proxy", "http://p:1"), ("NO_PROXY", "a,*")]).unwrap();
        assert!(listed.for_host(true, &name("example.com")).is_some());
    }
}
