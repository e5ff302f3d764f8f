//! The registries a served request may make the server contact: an image a
//! client names (`image`, or a `FROM` / `COPY --from` of an uploaded
//! Dockerfile) is pulled by the server, from the server's network. A
//! registry on a loopback, link-local, private or otherwise internal
//! address (its host name resolved, every address checked) is refused
//! unless the operator allows it (`--allow-registry`, `[serve]
//! allow_registries`), so that a client cannot make the server probe its
//! own machine or network (SSRF).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

use crate::images::ImageRef;
use crate::task::Task;

/// Docker Hub, where references without a registry go (public: never
/// resolved here; an operator's mirror of it is the operator's choice).
const DOCKER_HUB: &str = "docker.io";

/// Why a reference is refused: the whole message, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Check every image `task` (made from what a client sent) is built from.
pub fn check_task(task: &Task, allowed: &[String]) -> Result<(), Refused> {
    let def =
        crate::task::envdef::parse_task(task).map_err(|e| Refused(format!("environment: {e}")))?;
    let bases = def
        .stages
        .iter()
        .filter_map(|s| s.base.as_deref())
        .chain(def.base.as_deref());
    for base in bases {
        check_reference("image", base, allowed)?;
    }
    Ok(())
}

/// Check the registry of `reference` (client field `field`).
pub fn check_reference(field: &str, reference: &str, allowed: &[String]) -> Result<(), Refused> {
    let parsed = ImageRef::parse(reference).ok();
    let Some(registry) = parsed
        .as_ref()
        .map(ImageRef::registry_name)
        .or_else(|| written_registry(reference))
    else {
        // No registry of its own, and not a reference: never pulled.
        return Ok(());
    };
    if registry == DOCKER_HUB || is_allowed(registry, allowed) {
        return Ok(());
    }
    let (host, port) = split_host(registry);
    let refuse = |why: String| {
        Refused(format!(
            "{field}: {reference:?} names the registry {registry}, {why}; \
             served requests may not make the server contact its own or private \
             networks (an operator allows a registry with --allow-registry {registry})"
        ))
    };
    let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| refuse(format!("whose host cannot be resolved ({e})")))?
            .map(|a| a.ip())
            .collect(),
    };
    if addresses.is_empty() {
        return Err(refuse("whose host has no address".into()));
    }
    match addresses.iter().find(|ip| is_internal(**ip)) {
        Some(ip) => Err(refuse(format!("on the internal address {ip}"))),
        None => Ok(()),
    }
}

/// The registry written at the start of a reference that does not parse
/// (`[::1]:5000/x`): its first component when Docker would take it for a
/// host (it has a `.`, a `:` or brackets, or is `localhost`).
fn written_registry(reference: &str) -> Option<&str> {
    let (first, _) = reference.split_once('/')?;
    (first.contains(['.', ':', '[']) || first == "localhost").then_some(first)
}

/// Whether the operator allows `registry` (`host:port` as written): an
/// entry naming it exactly, or its host (any port).
fn is_allowed(registry: &str, allowed: &[String]) -> bool {
    let (host, _) = split_host(registry);
    allowed.iter().any(|a| {
        let a = a.trim();
        a.eq_ignore_ascii_case(registry)
            || a.trim_start_matches('[')
                .trim_end_matches(']')
                .eq_ignore_ascii_case(host)
    })
}

/// `host` and port of a registry (`[::1]:5000`, `10.0.0.1`, `reg:443`);
/// 443 when none is written.
fn split_host(registry: &str) -> (&str, u16) {
    if let Some(rest) = registry.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (host, port.unwrap_or(443));
    }
    match registry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, port.parse().unwrap_or(443)),
        _ => (registry, 443),
    }
}

/// Loopback, private, link-local, unspecified, shared (CGNAT), multicast
/// or broadcast, IPv4 or IPv6 (IPv4-mapped and NAT64 addresses by their
/// IPv4 part).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && ip.octets()[2] == 0)
        || a >= 240
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [.., hi, lo] = s;
        return internal_v4(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || s[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible (::a.b.c.d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_of_both_families_are_known() {
        for ip in [
            "127.0.0.1",
            "127.9.9.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "::127.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "172.32.0.1",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn registries_on_internal_addresses_are_refused_unless_allowed() {
        for reference in [
            "127.0.0.1:5000/x",
            "localhost:5000/x:1",
            "localhost/x",
            "[::1]:5000/x",
            "[fe80::1]:5000/x",
            "10.0.0.7/x",
            "169.254.169.254/latest",
            "0.0.0.0:80/x",
        ] {
            let e = check_reference("image", reference, &[]).unwrap_err().0;
            assert!(
                e.starts_with("image:") && e.contains("--allow-registry"),
                "{e}"
            );
        }
        // Docker Hub and public addresses pass, without asking DNS.
        for reference in ["debian:bookworm", "library/python:3.12", "8.8.8.8:5000/x"] {
            check_reference("image", reference, &[]).unwrap();
        }
        // The operator's allow-list: host and port, or the host alone.
        let allowed = ["127.0.0.1:5000".to_string(), "[::1]".to_string()];
        check_reference("image", "127.0.0.1:5000/x", &allowed).unwrap();
        check_reference("image", "[::1]:5001/x", &allowed).unwrap();
        assert!(check_reference("image", "127.0.0.1:5001/x", &allowed).is_err());
    }

    #[test]
    fn registry_hosts_and_ports_are_split() {
        assert_eq!(split_host("[::1]:5000"), ("::1", 5000));
        assert_eq!(split_host("[::1]"), ("::1", 443));
        assert_eq!(split_host("reg.example:8443"), ("reg.example", 8443));
        assert_eq!(split_host("10.0.0.1"), ("10.0.0.1", 443));
    }
}
