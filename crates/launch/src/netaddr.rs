//! Which address a node's daemon serves on.
//!
//! A daemon must be reachable from every other node and from the launcher, so the
//! default is the node's address on the path the launcher used to reach it: for ssh
//! the server address of the connection (`SSH_CONNECTION`), for srun the local
//! address the kernel routes towards the launching node (`SLURM_LAUNCH_NODE_IPADDR`).
//! `--network CIDR` picks instead the node's interface address inside that network
//! (say, the high-speed one).

use std::net::{IpAddr, UdpSocket};

/// The local address the kernel would use to reach `peer` (no packet is sent: a UDP
/// connect only selects a route).
pub fn local_ip_toward(peer: IpAddr) -> std::io::Result<IpAddr> {
    let s = if peer.is_ipv4() { UdpSocket::bind("0.0.0.0:0")? } else { UdpSocket::bind("[::]:0")? };
    s.connect((peer, 9))?;
    Ok(s.local_addr()?.ip())
}

/// A network in CIDR notation, e.g. 10.78.0.0/24.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix_len: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, p) =
            s.split_once('/').ok_or_else(|| format!("bad network '{s}': want ADDRESS/PREFIX, e.g. 10.0.0.0/16"))?;
        let addr: IpAddr = a.parse().map_err(|_| format!("bad network '{s}': '{a}' is not an IP address"))?;
        let prefix_len: u8 = p.parse().map_err(|_| format!("bad network '{s}': '{p}' is not a prefix length"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix_len > max {
            return Err(format!("bad network '{s}': prefix length over {max}"));
        }
        Ok(Cidr { addr, prefix_len })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix_len == 0 { 0 } else { u32::MAX << (32 - self.prefix_len) };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.prefix_len == 0 { 0 } else { u128::MAX << (128 - self.prefix_len) };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

pub use gust_probe::interfaces;

/// The address this node's daemon should serve on; see the module doc.
pub fn choose_listen_ip(network: Option<&Cidr>) -> Result<IpAddr, String> {
    if let Some(n) = network {
        return interfaces().into_iter().map(|(_, a)| a).find(|a| n.contains(*a)).ok_or_else(|| {
            let have: Vec<String> = interfaces().iter().map(|(i, a)| format!("{i} {a}")).collect();
            format!("no interface in network {}/{} (this node has: {})", n.addr, n.prefix_len, have.join(", "))
        });
    }
    if let Ok(c) = std::env::var("SSH_CONNECTION") {
        if let Some(ip) = c.split_whitespace().nth(2).and_then(|s| s.parse().ok()) {
            return Ok(ip);
        }
    }
    if let Ok(l) = std::env::var("SLURM_LAUNCH_NODE_IPADDR") {
        if let Ok(ip) = l.trim().parse::<IpAddr>() {
            return local_ip_toward(ip).map_err(|e| format!("no route to the launching node {ip}: {e}"));
        }
    }
    Err("cannot tell which address to serve on (not started through ssh or srun); pass --network CIDR".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr() {
        let c = Cidr::parse("10.78.0.0/24").unwrap();
        assert!(c.contains("10.78.0.7".parse().unwrap()));
        assert!(!c.contains("10.78.1.7".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains("1.2.3.4".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0").is_err());
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("x/8").is_err());
    }

    #[test]
    fn loopback_is_an_interface_and_routes_to_itself() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(interfaces().iter().any(|(_, a)| *a == lo));
        assert_eq!(local_ip_toward(lo).unwrap(), lo);
        assert_eq!(choose_listen_ip(Some(&Cidr::parse("127.0.0.0/8").unwrap())).unwrap(), lo);
    }
}
