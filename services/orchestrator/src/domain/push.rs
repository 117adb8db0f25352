//! Push notifications: where a task's status changes are sent (a client's
//! webhook), which addresses may receive them, and how often a failed
//! delivery is tried again.

use std::net::IpAddr;

use super::{DomainError, TaskId};

/// A webhook a task's status changes are pushed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushConfig {
    pub id: String,
    pub task_id: TaskId,
    pub url: url::Url,
    /// The client's A2A token, sent back with each notification as the A2A
    /// protocol says (empty: none given, none sent). Never given to a viewer.
    pub token: String,
    /// The key each notification's signature is made with: made by Chorus,
    /// given once to whoever created the config, never read back. None for
    /// configs made before there were signing secrets (they are not signed).
    pub secret: Option<String>,
    /// Sent as the `Authorization` header: `<scheme> <credentials>`.
    pub authentication: Option<PushAuth>,
    pub created_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushAuth {
    pub scheme: String,
    pub credentials: String,
}

/// Most push configs a task has.
pub const MAX_PUSH_CONFIGS: usize = 8;
/// Most attempts at one notification; then it is dropped (and logged).
pub const MAX_PUSH_ATTEMPTS: i32 = 8;

/// How long after failed attempt `attempts` (1, 2, ...) the next one is
/// made: 1 s, doubling, at most 5 minutes.
pub fn push_retry_ms(attempts: i32) -> i64 {
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(9);
    (1000_i64 << doublings).min(300_000)
}

/// Checks a webhook URL as given: `http://` or `https://` then a host, no
/// credentials in it, at most 2 KiB, and no host that names this machine or
/// a cloud's metadata service (`localhost`, a loopback, link-local or
/// unspecified address). Where a host resolves, and whether that is one of
/// this machine's addresses, is checked at creation and at each delivery
/// ([`PushNetworks::refusal`]). A URL a lenient parser would mend is
/// refused: `http:///nohost` has no host, whatever `nohost` may be.
pub fn check_push_url(text: &str) -> Result<url::Url, DomainError> {
    let bad = |why: &str| DomainError::invalid("url", format!("{why}: '{text}'"));
    if text.len() > 2048 {
        return Err(DomainError::invalid("url", "longer than 2048 bytes"));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err(bad(
            "a URL has no spaces, control characters or backslashes",
        ));
    }
    let lower = text.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return Err(bad("a webhook is http:// or https://"));
    };
    if rest.is_empty() || rest.starts_with(['/', '?', '#', '@', ':']) {
        return Err(bad("no host"));
    }
    let url = url::Url::parse(text).map_err(|e| bad(&format!("not a URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("credentials go in authentication, not in the URL"));
    }
    match url.host() {
        None => Err(bad("no host")),
        Some(url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if name == "localhost" || name.ends_with(".localhost") {
                return Err(bad("never this machine"));
            }
            Ok(url)
        }
        Some(url::Host::Ipv4(ip)) => {
            never_reached(IpAddr::V4(ip)).map_or(Ok(url), |why| Err(bad(why)))
        }
        Some(url::Host::Ipv6(ip)) => {
            never_reached(IpAddr::V6(ip)).map_or(Ok(url), |why| Err(bad(why)))
        }
    }
}

/// Why an address never receives a notification, whatever the operator
/// allows: this machine, the link (a cloud's metadata service is
/// 169.254.169.254), nowhere, or many at once.
fn never_reached(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some("never this machine (a loopback address)"),
        IpAddr::V4(v4) if v4.is_link_local() => {
            Some("never a link-local address (where cloud metadata services answer)")
        }
        // 0.0.0.0/8 is "this network": 0.x.y.z reaches this machine.
        IpAddr::V4(v4) if v4.octets()[0] == 0 || v4.is_broadcast() || v4.is_multicast() => {
            Some("not a host's address")
        }
        IpAddr::V6(v6) if v6.is_loopback() => Some("never this machine (a loopback address)"),
        IpAddr::V6(v6)
            if v6.is_unicast_link_local()
                || v6.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254] =>
        {
            Some("never a link-local or metadata address")
        }
        IpAddr::V6(v6) if v6.is_unspecified() || v6.is_multicast() => Some("not a host's address"),
        _ => None,
    }
}

/// Whether a private address (10/8, 172.16/12, 192.168/16, 100.64/10,
/// fc00::/7): reached only when the operator allows its network.
fn private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private() || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or((v6.segments()[0] & 0xfe00) == 0xfc00, |v4| {
                private(IpAddr::V4(v4))
            }),
    }
}

/// Which addresses webhooks may be reached at: public ones, and private
/// ones in the networks the operator allows (`--a2a-push-allow-network`);
/// never this machine's (loopback or any address of its interfaces, such as
/// the host's end of an allowed private network), link-local or metadata
/// addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushNetworks {
    allowed: Vec<(IpAddr, u8)>,
}

impl PushNetworks {
    /// Parses CIDRs (`10.20.0.0/16`, `fd00::/8`).
    pub fn parse(cidrs: &[String]) -> Result<Self, String> {
        let allowed = cidrs
            .iter()
            .map(|cidr| {
                let (ip, bits) = cidr
                    .split_once('/')
                    .ok_or_else(|| format!("'{cidr}' is not a network (address/bits)"))?;
                let ip: IpAddr = ip.parse().map_err(|e| format!("'{cidr}': {e}"))?;
                let bits: u8 = bits.parse().map_err(|e| format!("'{cidr}': {e}"))?;
                let most = if ip.is_ipv4() { 32 } else { 128 };
                if bits > most {
                    return Err(format!("'{cidr}': at most /{most}"));
                }
                Ok((ip, bits))
            })
            .collect::<Result<_, String>>()?;
        Ok(Self { allowed })
    }

    /// None when a webhook may be reached at `ip`, else why not. `own` are
    /// this machine's addresses, as its interfaces have them now.
    pub fn refusal(&self, ip: IpAddr, own: &[IpAddr]) -> Option<String> {
        if let Some(why) = never_reached(ip) {
            return Some(format!("{ip}: {why}"));
        }
        let canonical = |ip: IpAddr| match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if own.iter().any(|&mine| canonical(mine) == canonical(ip)) {
            return Some(format!(
                "{ip}: never this machine (one of its interfaces has this address)"
            ));
        }
        if private(ip)
            && !self
                .allowed
                .iter()
                .any(|&(net, bits)| contains(net, bits, ip))
        {
            return Some(format!(
                "{ip} is a private address; the operator allows private networks with --a2a-push-allow-network"
            ));
        }
        None
    }
}

fn contains(net: IpAddr, bits: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(net), IpAddr::V4(ip)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(net) & mask == u32::from(ip) & mask
        }
        (IpAddr::V6(net), IpAddr::V6(ip)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(net) & mask == u128::from(ip) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_never_names_this_machine_or_the_metadata_service() {
        for url in [
            "http://localhost/hook",
            "http://api.localhost/hook",
            "http://127.0.0.1:8080/hook",
            "http://[::1]/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://[::ffff:127.0.0.1]/hook",
            "http://0.0.0.0/hook",
            "ftp://example.com/hook",
            "http://user:pw@example.com/hook",
            "not a url",
            "http:///nohost",
            "http:nohost/hook",
            "https:\\\\evil.example\\hook",
            "http://\\evil.example/hook",
            "http:// example.com/hook",
            "http://@example.com/hook",
            "http://:80/hook",
            "http://0.1.2.3/hook",
            "HTTP:///nohost",
        ] {
            assert!(check_push_url(url).is_err(), "{url} was taken");
        }
        assert!(check_push_url("https://hooks.example.com/a2a?x=1").is_ok());
        assert!(check_push_url("http://10.200.0.2:9000/hook").is_ok());
    }

    #[test]
    fn private_networks_only_when_allowed_and_loopback_never() {
        let none = PushNetworks::default();
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert!(none.refusal(ip("93.184.216.34"), &[]).is_none());
        assert!(none.refusal(ip("10.200.1.2"), &[]).is_some());
        assert!(none.refusal(ip("100.64.0.1"), &[]).is_some());
        assert!(none.refusal(ip("fd12::1"), &[]).is_some());
        let some = PushNetworks::parse(&["10.200.0.0/16".to_owned()]).expect("parse");
        assert!(some.refusal(ip("10.200.1.2"), &[]).is_none());
        assert!(some.refusal(ip("10.201.1.2"), &[]).is_some());
        let all = PushNetworks::parse(&["0.0.0.0/0".to_owned(), "::/0".to_owned()]).expect("parse");
        for never in [
            "127.0.0.1",
            "169.254.169.254",
            "::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
        ] {
            assert!(all.refusal(ip(never), &[]).is_some(), "{never}");
        }
        // This machine's own addresses, however spelled, whatever is allowed.
        let own = [ip("10.200.0.1"), ip("93.184.216.34"), ip("2001:db8::7")];
        for mine in [
            "10.200.0.1",
            "::ffff:10.200.0.1",
            "93.184.216.34",
            "2001:db8::7",
        ] {
            let why = all.refusal(ip(mine), &own).unwrap_or_default();
            assert!(why.contains("this machine"), "{mine}: {why}");
        }
        assert!(all.refusal(ip("10.200.0.2"), &own).is_none());
        assert!(PushNetworks::parse(&["10.0.0.0".to_owned()]).is_err());
        assert!(PushNetworks::parse(&["10.0.0.0/33".to_owned()]).is_err());
    }

    #[test]
    fn retries_back_off_from_a_second_to_five_minutes() {
        assert_eq!(push_retry_ms(1), 1000);
        assert_eq!(push_retry_ms(2), 2000);
        assert_eq!(push_retry_ms(4), 8000);
        assert_eq!(push_retry_ms(20), 300_000);
    }
}
