//! Test support shared by the integration tests: the fakepve harness and a loopback
//! server standing in for the Talos Image Factory. Each test binary uses a part.
#![allow(dead_code)]

pub mod day2_cluster;
pub mod examples;
pub mod factory;
pub mod fakepve;
pub mod gitlab_state;
pub mod image_server;
pub mod lab;
pub mod talos_pki;
