//! The Talos side's test settings: simulated nodes on loopback addresses, one
//! bound for every wait on them and fast polling, so a test's waits take the
//! simulator's delays and little more.

use std::net::IpAddr;
use std::time::Duration;

use talosprov_retry::Backoff;
use talosprov_sim::state::SimOptions;

/// The bound on any wait for a simulated node (a test that passes waits far less).
pub const WAIT: Duration = Duration::from_secs(60);

/// Fast polling for loopback nodes: 20 ms, doubling up to 200 ms.
pub const FAST: Backoff = Backoff {
    initial: Duration::from_millis(20),
    max: Duration::from_millis(200),
};

/// The Talos version the simulated nodes boot unless a test says otherwise.
pub const TALOS: &str = "v1.13.8";

/// An address written as text (`"127.77.1.1"`); panics on a typo.
pub fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP address")
}

/// Simulator options: nodes boot [`TALOS`], and an install reboot takes `reboot`.
pub fn sim_options(reboot: Duration) -> SimOptions {
    SimOptions {
        talos_version: TALOS.into(),
        reboot_delay: reboot,
        ..SimOptions::default()
    }
}
