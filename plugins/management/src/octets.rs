//! Connections' socket byte counts and rates (RabbitMQ's `recv_oct`, `send_oct` and their
//! `_details.rate`), read from the kernel when a listing asks for them: one
//! `NETLINK_SOCK_DIAG` dump of the established TCP sockets gives each socket's
//! `tcpi_bytes_received` and `tcpi_bytes_acked`, what `ss -ti` shows. Nothing is counted on
//! the path that serves clients, and an idle broker does no work for these figures.
//!
//! Like RabbitMQ's (`inet:getstat`), the counts are the socket's: TLS and WebSocket framing
//! included. A rate is the change since the previous reading of the same connection at
//! least [`MIN_RATE_WINDOW`] earlier, so a page that refreshes every few seconds shows the
//! rate over its refresh period. Off Linux no counts are read and the fields are absent.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use std::sync::Mutex;

/// The shortest time between the two readings a rate is taken from.
pub const MIN_RATE_WINDOW: Duration = Duration::from_secs(1);

/// A socket's byte counts: received from the peer, and sent to it (and acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SocketOctets {
    /// `tcpi_bytes_received`.
    pub received: u64,
    /// `tcpi_bytes_acked`.
    pub sent: u64,
}

/// A connection's counts and rates as the API shows them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ConnectionOctets {
    /// Bytes received from the client.
    pub received: u64,
    /// Bytes sent to the client.
    pub sent: u64,
    /// Bytes per second received, over the last window.
    pub received_rate: f64,
    /// Bytes per second sent, over the last window.
    pub sent_rate: f64,
}

/// One connection's last reading.
#[derive(Debug, Clone, Copy)]
struct Reading {
    octets: SocketOctets,
    at: Instant,
    received_rate: f64,
    sent_rate: f64,
}

/// The previous readings, by connection (`(local, peer)` addresses), for the rates.
#[derive(Default)]
pub struct OctetRates {
    readings: Mutex<HashMap<(SocketAddr, SocketAddr), Reading>>,
}

impl std::fmt::Debug for OctetRates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OctetRates")
            .field("connections", &self.lock().len())
            .finish()
    }
}

impl OctetRates {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(SocketAddr, SocketAddr), Reading>> {
        // The table holds plain numbers: one a panicking holder left behind is still usable.
        self.readings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the kernel's counts now and returns them, with rates, for each of
    /// `connections` (`(local, peer)`) found among the established sockets. An error
    /// reading them (no netlink, another OS) gives an empty answer.
    pub fn read(
        &self,
        connections: &[(SocketAddr, SocketAddr)],
    ) -> HashMap<(SocketAddr, SocketAddr), ConnectionOctets> {
        if connections.is_empty() {
            return HashMap::new();
        }
        let sockets = match established_sockets() {
            Ok(sockets) => sockets,
            Err(error) => {
                tracing::debug!(%error, "could not read socket byte counts");
                return HashMap::new();
            }
        };
        self.update(connections, &sockets, Instant::now())
    }

    /// [`OctetRates::read`] with the sockets' counts given, at `now`.
    fn update(
        &self,
        connections: &[(SocketAddr, SocketAddr)],
        sockets: &HashMap<(SocketAddr, SocketAddr), SocketOctets>,
        now: Instant,
    ) -> HashMap<(SocketAddr, SocketAddr), ConnectionOctets> {
        let mut readings = self.lock();
        let mut answer = HashMap::with_capacity(connections.len());
        for key in connections {
            let Some(octets) = sockets.get(key).copied() else {
                continue;
            };
            let reading = match readings.get(key) {
                // A new socket on a reused address pair counts from zero again.
                Some(previous)
                    if octets.received >= previous.octets.received
                        && octets.sent >= previous.octets.sent =>
                {
                    let elapsed = now.saturating_duration_since(previous.at);
                    if elapsed < MIN_RATE_WINDOW {
                        *previous
                    } else {
                        let seconds = elapsed.as_secs_f64();
                        Reading {
                            octets,
                            at: now,
                            received_rate: (octets.received - previous.octets.received) as f64
                                / seconds,
                            sent_rate: (octets.sent - previous.octets.sent) as f64 / seconds,
                        }
                    }
                }
                _ => Reading {
                    octets,
                    at: now,
                    received_rate: 0.0,
                    sent_rate: 0.0,
                },
            };
            readings.insert(*key, reading);
            answer.insert(
                *key,
                ConnectionOctets {
                    received: octets.received,
                    sent: octets.sent,
                    received_rate: reading.received_rate,
                    sent_rate: reading.sent_rate,
                },
            );
        }
        // Forget connections that are gone, once the table is twice what is open.
        if readings.len() > 2 * connections.len() + 64 {
            let open: std::collections::HashSet<_> = connections.iter().collect();
            readings.retain(|key, _| open.contains(key));
        }
        answer
    }
}

/// The established TCP sockets' byte counts by `(local, peer)` address.
#[cfg(target_os = "linux")]
pub fn established_sockets() -> std::io::Result<HashMap<(SocketAddr, SocketAddr), SocketOctets>> {
    let mut sockets = HashMap::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        sock_diag::dump(family as u8, &mut sockets)?;
    }
    Ok(sockets)
}

/// Off Linux there is no `NETLINK_SOCK_DIAG`.
#[cfg(not(target_os = "linux"))]
pub fn established_sockets() -> std::io::Result<HashMap<(SocketAddr, SocketAddr), SocketOctets>> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// The netlink request and the parsing of its answer (linux/sock_diag.h, inet_diag.h,
/// tcp.h): the message layouts are fixed by the kernel's ABI.
#[cfg(target_os = "linux")]
mod sock_diag {
    use std::collections::HashMap;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::SocketOctets;

    const NETLINK_HEADER: usize = 16;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    const NLM_F_REQUEST: u16 = 0x1;
    const NLM_F_DUMP: u16 = 0x300;
    const INET_DIAG_INFO: u16 = 2;
    const TCP_ESTABLISHED: u32 = 1;
    /// `struct inet_diag_req_v2`.
    const REQUEST: usize = 56;
    /// `struct inet_diag_msg`.
    const MESSAGE: usize = 72;
    /// `tcpi_bytes_acked` and `tcpi_bytes_received` in `struct tcp_info` (Linux 4.1+).
    const BYTES_ACKED: usize = 120;
    const BYTES_RECEIVED: usize = 128;

    fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
        Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
    }

    fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    }

    fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    }

    /// The netlink request dumping `family`'s established TCP sockets with their `tcp_info`.
    pub(super) fn request(family: u8) -> Vec<u8> {
        let mut message = Vec::with_capacity(NETLINK_HEADER + REQUEST);
        message.extend_from_slice(&((NETLINK_HEADER + REQUEST) as u32).to_ne_bytes());
        message.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        message.extend_from_slice(&1u32.to_ne_bytes()); // sequence number
        message.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
        message.push(family);
        message.push(libc::IPPROTO_TCP as u8);
        message.push(1 << (INET_DIAG_INFO - 1)); // ask for INET_DIAG_INFO
        message.push(0);
        message.extend_from_slice(&(1u32 << TCP_ESTABLISHED).to_ne_bytes());
        message.resize(NETLINK_HEADER + REQUEST, 0); // the socket id: all zero, every socket
        message
    }

    /// The sockets in one datagram of the answer; `Ok(true)` once the dump is done.
    pub(super) fn parse(
        datagram: &[u8],
        sockets: &mut HashMap<(SocketAddr, SocketAddr), SocketOctets>,
    ) -> std::io::Result<bool> {
        let mut at = 0;
        while at + NETLINK_HEADER <= datagram.len() {
            let length = u32_at(datagram, at).unwrap_or(0) as usize;
            let kind = u16_at(datagram, at + 4).unwrap_or(0);
            if length < NETLINK_HEADER || at + length > datagram.len() {
                return Err(std::io::Error::other("truncated netlink message"));
            }
            match kind {
                NLMSG_DONE => return Ok(true),
                NLMSG_ERROR => {
                    let code = u32_at(datagram, at + NETLINK_HEADER).unwrap_or(0) as i32;
                    return Err(std::io::Error::from_raw_os_error(-code));
                }
                SOCK_DIAG_BY_FAMILY => {
                    if let Some((key, octets)) = socket(&datagram[at + NETLINK_HEADER..at + length])
                    {
                        sockets.insert(key, octets);
                    }
                }
                _ => {}
            }
            at += (length + 3) & !3;
        }
        Ok(false)
    }

    /// One `inet_diag_msg` and its attributes: the socket's addresses and byte counts.
    fn socket(message: &[u8]) -> Option<((SocketAddr, SocketAddr), SocketOctets)> {
        if message.len() < MESSAGE {
            return None;
        }
        let family = message[0];
        let local_port = u16::from_be_bytes([message[4], message[5]]);
        let peer_port = u16::from_be_bytes([message[6], message[7]]);
        let address = |at: usize| -> Option<IpAddr> {
            if family == libc::AF_INET as u8 {
                let octets: [u8; 4] = message.get(at..at + 4)?.try_into().ok()?;
                Some(IpAddr::V4(Ipv4Addr::from(octets)))
            } else {
                let octets: [u8; 16] = message.get(at..at + 16)?.try_into().ok()?;
                Some(IpAddr::V6(Ipv6Addr::from(octets)))
            }
        };
        let local = SocketAddr::new(address(8)?, local_port);
        let peer = SocketAddr::new(address(24)?, peer_port);
        let mut at = MESSAGE;
        while at + 4 <= message.len() {
            let length = u16_at(message, at)? as usize;
            let kind = u16_at(message, at + 2)?;
            if length < 4 || at + length > message.len() {
                return None;
            }
            if kind == INET_DIAG_INFO {
                let info = &message[at + 4..at + length];
                let octets = SocketOctets {
                    received: u64_at(info, BYTES_RECEIVED)?,
                    sent: u64_at(info, BYTES_ACKED)?,
                };
                return Some(((local, peer), octets));
            }
            at += (length + 3) & !3;
        }
        None
    }

    /// Dumps `family`'s established TCP sockets into `sockets`.
    pub(super) fn dump(
        family: u8,
        sockets: &mut HashMap<(SocketAddr, SocketAddr), SocketOctets>,
    ) -> std::io::Result<()> {
        // SAFETY: socket() takes no pointers; its result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor this function owns from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let request = request(family);
        // SAFETY: the pointer and length describe `request`, alive for the call. An
        // unconnected netlink socket sends to the kernel.
        let sent = unsafe { libc::send(fd.as_raw_fd(), request.as_ptr().cast(), request.len(), 0) };
        if sent < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: the pointer and length describe `buffer`, alive for the call.
            let received =
                unsafe { libc::recv(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len(), 0) };
            if received < 0 {
                let error = std::io::Error::last_os_error();
                if error.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            if received == 0 || parse(&buffer[..received as usize], sockets)? {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn rates_are_the_change_over_at_least_the_window() {
        let rates = OctetRates::default();
        let key = (addr("127.0.0.1:5672"), addr("127.0.0.1:40000"));
        let start = Instant::now();
        let mut sockets = HashMap::new();
        sockets.insert(
            key,
            SocketOctets {
                received: 100,
                sent: 1000,
            },
        );
        let first = rates.update(&[key], &sockets, start);
        assert_eq!(first[&key].received, 100);
        assert_eq!(first[&key].received_rate, 0.0);
        sockets.insert(
            key,
            SocketOctets {
                received: 300,
                sent: 5000,
            },
        );
        // Too soon for a rate: the previous one (none yet) stands; the counts are fresh.
        let soon = rates.update(&[key], &sockets, start + Duration::from_millis(500));
        assert_eq!(soon[&key].received_rate, 0.0);
        assert_eq!(soon[&key].received, 300);
        let later = rates.update(&[key], &sockets, start + Duration::from_secs(2));
        assert_eq!(later[&key].received_rate, 100.0);
        assert_eq!(later[&key].sent_rate, 2000.0);
        assert_eq!(later[&key].sent, 5000);
        // A connection the kernel does not list gets no entry.
        let other = (addr("127.0.0.1:5672"), addr("127.0.0.1:40001"));
        assert!(!rates.update(&[other], &sockets, start).contains_key(&other));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_loopback_connection_is_found_with_its_bytes() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut server, peer) = listener.accept().unwrap();
        client.write_all(&[7u8; 1000]).unwrap();
        let mut read = [0u8; 1000];
        server.read_exact(&mut read).unwrap();
        server.write_all(&[8u8; 300]).unwrap();
        let mut read = [0u8; 300];
        client.read_exact(&mut read).unwrap();
        // The sent count is of acknowledged bytes: the client's ACK may take a moment.
        let key = (server.local_addr().unwrap(), peer);
        let deadline = Instant::now() + Duration::from_secs(5);
        let server_side = loop {
            let sockets = established_sockets().expect("sock_diag dump");
            let found = *sockets.get(&key).expect("the server's socket is listed");
            if found.sent == 300 || Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(server_side.received, 1000);
        assert_eq!(server_side.sent, 300);
    }
}
