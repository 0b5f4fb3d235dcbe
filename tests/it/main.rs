//! The integration tests, as one test binary (one link of the crate instead of one
//! per file): each former `tests/<name>.rs` is the module `<name>`, and `support`
//! holds the helpers they share. Run one group with `cargo test --test it <name>::`.

mod support;

mod architecture;
mod ci_no_terminal;
mod ci_pipeline;
mod cli_help;
mod cli_machineconfig;
mod cli_render;
mod day2_config;
mod day2_health;
mod day2_lab;
mod day2_remove;
mod day2_upgrade;
mod day2_vm;
mod engine_lab;
mod engine_secrets;
mod factory_client;
mod gitlab_ci_example;
mod interrupt_lab;
mod machine_client_configs;
mod machine_config;
mod machine_pki;
mod machine_secrets_file;
mod machine_strict;
mod machineconfig_patch;
mod own_fields;
mod own_kill;
mod own_lab;
mod own_plan;
mod patch_pipeline;
mod plan_snapshots;
mod proxmox_client;
mod proxmox_create;
mod proxmox_faults;
mod proxmox_images;
mod proxmox_lifecycle;
mod proxmox_readback;
mod proxmox_retries;
mod proxmox_tls;
mod render_homelab;
mod saved_plan;
mod state_cli;
mod state_http;
mod state_locks;
mod state_safety;
mod talos_faults;
mod talos_lifecycle;
mod talos_tls;
mod talos_waits;
mod topology_fuzz;
mod topology_rules;
mod validate_fixtures;
mod validate_homelab;
mod waits_lab;
