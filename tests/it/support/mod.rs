//! What the integration tests share, one copy of each:
//! - [`cli`]: the `talosprov` binary under test and its output;
//! - [`fixtures`]: the repository's files and the fixture secrets bundle;
//! - [`wait`]: polling under a bound;
//! - [`talos`], [`talos_pki`], [`day2_cluster`]: simulated Talos nodes, their
//!   certificates and a running cluster of them;
//! - [`fakepve`], [`examples`]: the Proxmox VE fake and the example VMs;
//! - [`factory`]: a loopback Image Factory stand-in;
//! - [`gitlab_state`]: GitLab's Terraform state API;
//! - [`moto`]: moto's S3 server, with faults on demand;
//! - [`lab`]: all of them together, with the lab topology, for end-to-end runs;
//! - [`running`]: a talosprov run in the background, to stop with a signal;
//! - [`tfstate`]: an OpenTofu state of a cluster, for `adopt`.
//!
//! `fakepve.rs`, `factory.rs` and `wait.rs` use nothing else from here: the
//! `bench_apply` example includes them too.

pub mod cli;
pub mod day2_cluster;
pub mod examples;
pub mod factory;
pub mod fakepve;
pub mod fixtures;
pub mod gitlab_state;
pub mod kubectl;
pub mod lab;
pub mod moto;
pub mod running;
pub mod talos;
pub mod talos_pki;
pub mod tfstate;
pub mod wait;
