//! Rust code generated at build time from our `proto/` files (common, machine,
//! google.rpc), wire-compatible with the Talos API. Only `talos` and `sim` use it.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/talos_api.rs"));

/// Wire checks: our field numbers and gRPC paths must be Talos's, byte for byte.
#[cfg(test)]
mod tests {
    use super::common::{ContainerDriver, ContainerdInstance, ContainerdNamespace};
    use super::machine::*;
    use prost::Message as _;

    #[test]
    fn apply_configuration_request_uses_fields_1_4_5_6() {
        let request = ApplyConfigurationRequest {
            data: b"x".to_vec(),
            mode: apply_configuration_request::Mode::NoReboot as i32,
            dry_run: true,
            try_mode_timeout: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
        };
        let expected = [0x0a, 1, b'x', 0x20, 2, 0x28, 1, 0x32, 2, 0x08, 60];
        assert_eq!(request.encode_to_vec(), expected);
    }

    #[test]
    fn cosi_get_request_and_machine_config_spec_use_cosi_and_talos_field_numbers() {
        let request = super::cosi::resource::GetRequest {
            namespace: "config".into(),
            r#type: "T".into(),
            id: "v".into(),
            options: Some(super::cosi::resource::GetOptions {}),
        };
        let mut expected = vec![0x0a, 6];
        expected.extend_from_slice(b"config");
        expected.extend_from_slice(&[0x12, 1, b'T', 0x1a, 1, b'v', 0x22, 0]);
        assert_eq!(request.encode_to_vec(), expected);
        let spec = super::resource::config::MachineConfigSpec {
            yaml_marshalled: b"a".to_vec(),
        };
        assert_eq!(spec.encode_to_vec(), [0x0a, 1, b'a']);
        let resource = super::cosi::resource::Resource {
            metadata: None,
            spec: Some(super::cosi::resource::Spec {
                proto_spec: b"p".to_vec(),
                yaml_spec: "y".into(),
            }),
        };
        assert_eq!(
            resource.encode_to_vec(),
            [0x12, 6, 0x0a, 1, b'p', 0x12, 1, b'y']
        );
    }

    #[test]
    fn etcd_member_starts_at_field_2() {
        let member = EtcdMember {
            id: 1,
            hostname: "a".into(),
            ..Default::default()
        };
        assert_eq!(member.encode_to_vec(), [0x10, 1, 0x1a, 1, b'a']);
    }

    #[test]
    fn image_pull_request_puts_the_reference_in_field_3() {
        let request = ImageServicePullRequest {
            containerd: Some(ContainerdInstance {
                driver: ContainerDriver::Cri as i32,
                namespace: ContainerdNamespace::NsSystem as i32,
            }),
            image_ref: "i".into(),
        };
        assert_eq!(
            request.encode_to_vec(),
            [0x0a, 4, 0x08, 1, 0x10, 1, 0x1a, 1, b'i']
        );
    }

    #[test]
    fn lifecycle_exit_code_is_field_2_of_the_progress() {
        let reply = LifecycleServiceUpgradeResponse {
            progress: Some(LifecycleServiceInstallProgress {
                response: Some(lifecycle_service_install_progress::Response::ExitCode(3)),
            }),
        };
        assert_eq!(reply.encode_to_vec(), [0x0a, 2, 0x10, 3]);
    }

    #[test]
    fn upgrade_and_reset_requests_match_talos() {
        let upgrade = UpgradeRequest {
            image: "i".into(),
            stage: true,
            reboot_mode: upgrade_request::RebootMode::Powercycle as i32,
            ..Default::default()
        };
        assert_eq!(upgrade.encode_to_vec(), [0x0a, 1, b'i', 0x18, 1, 0x28, 1]);
        let reset = ResetRequest {
            graceful: true,
            reboot: true,
            system_partitions_to_wipe: vec![ResetPartitionSpec {
                label: "S".into(),
                wipe: true,
            }],
            user_disks_to_wipe: Vec::new(),
            mode: reset_request::WipeMode::SystemDisk as i32,
        };
        let expected = [0x08, 1, 0x10, 1, 0x1a, 5, 0x0a, 1, b'S', 0x10, 1, 0x28, 1];
        assert_eq!(reset.encode_to_vec(), expected);
    }

    #[test]
    fn bootstrap_recovery_fields_and_etcd_recover_reply_match_talos() {
        let request = BootstrapRequest {
            recover_etcd: true,
            recover_skip_hash_check: true,
        };
        assert_eq!(request.encode_to_vec(), [0x08, 1, 0x10, 1]);
        let reply = EtcdRecoverResponse {
            messages: vec![EtcdRecover {
                metadata: Some(super::common::Metadata {
                    hostname: "h".into(),
                    ..Default::default()
                }),
            }],
        };
        assert_eq!(reply.encode_to_vec(), [0x0a, 5, 0x0a, 3, 0x0a, 1, b'h']);
    }

    #[test]
    fn grpc_paths_are_talos_paths() {
        let generated = include_str!(concat!(env!("OUT_DIR"), "/machine.rs"));
        for path in [
            "/machine.MachineService/ApplyConfiguration",
            "/machine.MachineService/Bootstrap",
            "/machine.MachineService/Kubeconfig",
            "/machine.MachineService/Version",
            "/machine.MachineService/EtcdMemberList",
            "/machine.MachineService/EtcdLeaveCluster",
            "/machine.MachineService/EtcdRemoveMemberByID",
            "/machine.MachineService/EtcdSnapshot",
            "/machine.MachineService/EtcdRecover",
            "/machine.MachineService/ServiceList",
            "/machine.MachineService/Reboot",
            "/machine.MachineService/Reset",
            "/machine.MachineService/Upgrade",
            "/machine.ImageService/Pull",
            "/machine.LifecycleService/Upgrade",
        ] {
            assert!(generated.contains(&format!("\"{path}\"")), "{path} missing");
        }
    }
}
