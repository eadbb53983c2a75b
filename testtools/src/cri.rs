//! The CRI calls only tests make: run and remove pod sandboxes, create, start, stop and
//! remove containers, image and container status, on [`CriClient::unary`] (the one generic call
//! the product's client keeps), with the `runtime.v1` messages they need.

use std::collections::HashMap;
use storepatch::live::cri::{CriClient, CriError};

/// `runtime.v1` messages of the test-only calls, plus (re-exported) those of the product's
/// client, so `v1::` names the whole subset either side uses.
///
/// Names, field numbers and types are those of kubernetes/cri-api
/// `pkg/apis/runtime/v1/api.proto`, which documents every field; fields not declared here are
/// skipped by the decoder (protobuf rules).
// Field by field doc comments would restate api.proto; its names are kept verbatim instead.
#[allow(missing_docs)]
pub mod v1 {
    use std::collections::HashMap;

    pub use storepatch::live::cri::v1::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum NamespaceMode {
        Pod = 0,
        Container = 1,
        Node = 2,
        Target = 3,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum PodSandboxState {
        SandboxReady = 0,
        SandboxNotready = 1,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mount {
        #[prost(string, tag = "1")]
        pub container_path: String,
        #[prost(string, tag = "2")]
        pub host_path: String,
        #[prost(bool, tag = "3")]
        pub readonly: bool,
        #[prost(bool, tag = "4")]
        pub selinux_relabel: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NamespaceOption {
        #[prost(enumeration = "NamespaceMode", tag = "1")]
        pub network: i32,
        #[prost(enumeration = "NamespaceMode", tag = "2")]
        pub pid: i32,
        #[prost(enumeration = "NamespaceMode", tag = "3")]
        pub ipc: i32,
        #[prost(string, tag = "4")]
        pub target_id: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Int64Value {
        #[prost(int64, tag = "1")]
        pub value: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxSandboxSecurityContext {
        #[prost(message, optional, tag = "1")]
        pub namespace_options: Option<NamespaceOption>,
        #[prost(message, optional, tag = "3")]
        pub run_as_user: Option<Int64Value>,
        #[prost(bool, tag = "4")]
        pub readonly_rootfs: bool,
        #[prost(bool, tag = "6")]
        pub privileged: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxPodSandboxConfig {
        #[prost(string, tag = "1")]
        pub cgroup_parent: String,
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxSandboxSecurityContext>,
        #[prost(map = "string, string", tag = "3")]
        pub sysctls: HashMap<String, String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxMetadata {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub uid: String,
        #[prost(string, tag = "3")]
        pub namespace: String,
        #[prost(uint32, tag = "4")]
        pub attempt: u32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<PodSandboxMetadata>,
        #[prost(string, tag = "2")]
        pub hostname: String,
        #[prost(string, tag = "3")]
        pub log_directory: String,
        #[prost(map = "string, string", tag = "6")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "7")]
        pub annotations: HashMap<String, String>,
        #[prost(message, optional, tag = "8")]
        pub linux: Option<LinuxPodSandboxConfig>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxRequest {
        #[prost(message, optional, tag = "1")]
        pub config: Option<PodSandboxConfig>,
        #[prost(string, tag = "2")]
        pub runtime_handler: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RunPodSandboxResponse {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopPodSandboxRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopPodSandboxResponse {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RemovePodSandboxRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RemovePodSandboxResponse {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxStateValue {
        #[prost(enumeration = "PodSandboxState", tag = "1")]
        pub state: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandboxFilter {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(message, optional, tag = "2")]
        pub state: Option<PodSandboxStateValue>,
        #[prost(map = "string, string", tag = "3")]
        pub label_selector: HashMap<String, String>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxRequest {
        #[prost(message, optional, tag = "1")]
        pub filter: Option<PodSandboxFilter>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PodSandbox {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(message, optional, tag = "2")]
        pub metadata: Option<PodSandboxMetadata>,
        #[prost(enumeration = "PodSandboxState", tag = "3")]
        pub state: i32,
        #[prost(int64, tag = "4")]
        pub created_at: i64,
        #[prost(map = "string, string", tag = "5")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "6")]
        pub annotations: HashMap<String, String>,
        #[prost(string, tag = "7")]
        pub runtime_handler: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ListPodSandboxResponse {
        #[prost(message, repeated, tag = "1")]
        pub items: Vec<PodSandbox>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerResources {
        #[prost(int64, tag = "1")]
        pub cpu_period: i64,
        #[prost(int64, tag = "2")]
        pub cpu_quota: i64,
        #[prost(int64, tag = "3")]
        pub cpu_shares: i64,
        #[prost(int64, tag = "4")]
        pub memory_limit_in_bytes: i64,
        #[prost(int64, tag = "5")]
        pub oom_score_adj: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerSecurityContext {
        #[prost(bool, tag = "2")]
        pub privileged: bool,
        #[prost(message, optional, tag = "3")]
        pub namespace_options: Option<NamespaceOption>,
        #[prost(message, optional, tag = "5")]
        pub run_as_user: Option<Int64Value>,
        #[prost(bool, tag = "7")]
        pub readonly_rootfs: bool,
        #[prost(bool, tag = "11")]
        pub no_new_privs: bool,
        #[prost(string, repeated, tag = "13")]
        pub masked_paths: Vec<String>,
        #[prost(string, repeated, tag = "14")]
        pub readonly_paths: Vec<String>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LinuxContainerConfig {
        #[prost(message, optional, tag = "1")]
        pub resources: Option<LinuxContainerResources>,
        #[prost(message, optional, tag = "2")]
        pub security_context: Option<LinuxContainerSecurityContext>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ContainerConfig {
        #[prost(message, optional, tag = "1")]
        pub metadata: Option<ContainerMetadata>,
        #[prost(message, optional, tag = "2")]
        pub image: Option<ImageSpec>,
        #[prost(string, repeated, tag = "3")]
        pub command: Vec<String>,
        #[prost(string, repeated, tag = "4")]
        pub args: Vec<String>,
        #[prost(string, tag = "5")]
        pub working_dir: String,
        #[prost(message, repeated, tag = "6")]
        pub envs: Vec<KeyValue>,
        #[prost(message, repeated, tag = "7")]
        pub mounts: Vec<Mount>,
        #[prost(map = "string, string", tag = "9")]
        pub labels: HashMap<String, String>,
        #[prost(map = "string, string", tag = "10")]
        pub annotations: HashMap<String, String>,
        #[prost(string, tag = "11")]
        pub log_path: String,
        #[prost(bool, tag = "12")]
        pub stdin: bool,
        #[prost(bool, tag = "13")]
        pub stdin_once: bool,
        #[prost(bool, tag = "14")]
        pub tty: bool,
        #[prost(message, optional, tag = "15")]
        pub linux: Option<LinuxContainerConfig>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerRequest {
        #[prost(string, tag = "1")]
        pub pod_sandbox_id: String,
        #[prost(message, optional, tag = "2")]
        pub config: Option<ContainerConfig>,
        #[prost(message, optional, tag = "3")]
        pub sandbox_config: Option<PodSandboxConfig>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CreateContainerResponse {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StartContainerRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StartContainerResponse {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopContainerRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
        #[prost(int64, tag = "2")]
        pub timeout: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StopContainerResponse {}
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RemoveContainerRequest {
        #[prost(string, tag = "1")]
        pub container_id: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RemoveContainerResponse {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageStatusRequest {
        #[prost(message, optional, tag = "1")]
        pub image: Option<ImageSpec>,
        #[prost(bool, tag = "2")]
        pub verbose: bool,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Image {
        #[prost(string, tag = "1")]
        pub id: String,
        #[prost(string, repeated, tag = "2")]
        pub repo_tags: Vec<String>,
        #[prost(string, repeated, tag = "3")]
        pub repo_digests: Vec<String>,
        #[prost(uint64, tag = "4")]
        pub size: u64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ImageStatusResponse {
        #[prost(message, optional, tag = "1")]
        pub image: Option<Image>,
        #[prost(map = "string, string", tag = "2")]
        pub info: HashMap<String, String>,
    }
}

/// The test-only CRI calls, on the product's [`CriClient`].
pub trait CriTestCalls {
    /// `RunPodSandbox`; returns the sandbox id.
    fn run_pod_sandbox(&self, config: &v1::PodSandboxConfig) -> Result<String, CriError>;
    /// `StopPodSandbox`.
    fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError>;
    /// `RemovePodSandbox`.
    fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError>;
    /// `ListPodSandbox` without a filter.
    fn list_pod_sandbox(&self) -> Result<Vec<v1::PodSandbox>, CriError>;
    /// `CreateContainer` in sandbox `pod_sandbox_id`; returns the container id.
    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &v1::ContainerConfig,
        sandbox_config: &v1::PodSandboxConfig,
    ) -> Result<String, CriError>;
    /// `StartContainer`.
    fn start_container(&self, id: &str) -> Result<(), CriError>;
    /// `StopContainer`, killing it after `timeout_s` seconds.
    fn stop_container(&self, id: &str, timeout_s: i64) -> Result<(), CriError>;
    /// `RemoveContainer`.
    fn remove_container(&self, id: &str) -> Result<(), CriError>;
    /// `ContainerStatus`; `verbose` adds the runtime's `info` map (containerd: the pid).
    fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<v1::ContainerStatusResponse, CriError>;
    /// `ImageStatus` of `image` (name or id); `None` when the runtime does not have it.
    fn image_status(&self, image: &str) -> Result<Option<v1::Image>, CriError>;
}

impl CriTestCalls for CriClient {
    fn run_pod_sandbox(&self, config: &v1::PodSandboxConfig) -> Result<String, CriError> {
        let r: v1::RunPodSandboxResponse = self.unary(
            "/runtime.v1.RuntimeService/RunPodSandbox",
            v1::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            },
        )?;
        Ok(r.pod_sandbox_id)
    }

    fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let _: v1::StopPodSandboxResponse = self.unary(
            "/runtime.v1.RuntimeService/StopPodSandbox",
            v1::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let _: v1::RemovePodSandboxResponse = self.unary(
            "/runtime.v1.RuntimeService/RemovePodSandbox",
            v1::RemovePodSandboxRequest {
                pod_sandbox_id: id.into(),
            },
        )?;
        Ok(())
    }

    fn list_pod_sandbox(&self) -> Result<Vec<v1::PodSandbox>, CriError> {
        let r: v1::ListPodSandboxResponse = self.unary(
            "/runtime.v1.RuntimeService/ListPodSandbox",
            v1::ListPodSandboxRequest { filter: None },
        )?;
        Ok(r.items)
    }

    fn create_container(
        &self,
        pod_sandbox_id: &str,
        config: &v1::ContainerConfig,
        sandbox_config: &v1::PodSandboxConfig,
    ) -> Result<String, CriError> {
        let r: v1::CreateContainerResponse = self.unary(
            "/runtime.v1.RuntimeService/CreateContainer",
            v1::CreateContainerRequest {
                pod_sandbox_id: pod_sandbox_id.into(),
                config: Some(config.clone()),
                sandbox_config: Some(sandbox_config.clone()),
            },
        )?;
        Ok(r.container_id)
    }

    fn start_container(&self, id: &str) -> Result<(), CriError> {
        let _: v1::StartContainerResponse = self.unary(
            "/runtime.v1.RuntimeService/StartContainer",
            v1::StartContainerRequest {
                container_id: id.into(),
            },
        )?;
        Ok(())
    }

    fn stop_container(&self, id: &str, timeout_s: i64) -> Result<(), CriError> {
        let _: v1::StopContainerResponse = self.unary(
            "/runtime.v1.RuntimeService/StopContainer",
            v1::StopContainerRequest {
                container_id: id.into(),
                timeout: timeout_s,
            },
        )?;
        Ok(())
    }

    fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let _: v1::RemoveContainerResponse = self.unary(
            "/runtime.v1.RuntimeService/RemoveContainer",
            v1::RemoveContainerRequest {
                container_id: id.into(),
            },
        )?;
        Ok(())
    }

    fn container_status(
        &self,
        id: &str,
        verbose: bool,
    ) -> Result<v1::ContainerStatusResponse, CriError> {
        self.unary(
            "/runtime.v1.RuntimeService/ContainerStatus",
            v1::ContainerStatusRequest {
                container_id: id.into(),
                verbose,
            },
        )
    }

    fn image_status(&self, image: &str) -> Result<Option<v1::Image>, CriError> {
        let r: v1::ImageStatusResponse = self.unary(
            "/runtime.v1.ImageService/ImageStatus",
            v1::ImageStatusRequest {
                image: Some(v1::ImageSpec {
                    image: image.into(),
                    annotations: HashMap::new(),
                    user_specified_image: String::new(),
                }),
                verbose: false,
            },
        )?;
        Ok(r.image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Wire bytes as protoc would produce them for api.proto: checks the hand-written field
    /// numbers and types of the messages the tests send.
    #[test]
    fn wire_format_matches_api_proto_numbers() {
        // ContainerConfig.annotations is field 10, labels field 9, log_path 11
        let mut cfg = v1::ContainerConfig {
            log_path: "l".into(),
            ..Default::default()
        };
        cfg.annotations.insert("a".into(), "b".into());
        assert_eq!(
            cfg.encode_to_vec(),
            vec![0x52, 6, 0x0a, 1, b'a', 0x12, 1, b'b', 0x5a, 1, b'l']
        );

        // NamespaceOption network=NODE(2) is field 1
        let ns = v1::NamespaceOption {
            network: v1::NamespaceMode::Node as i32,
            ..Default::default()
        };
        assert_eq!(ns.encode_to_vec(), vec![0x08, 2]);

        // CreateContainerRequest: pod_sandbox_id 1, config 2 (ContainerConfig.metadata 1)
        let req = v1::CreateContainerRequest {
            pod_sandbox_id: "p".into(),
            config: Some(v1::ContainerConfig {
                metadata: Some(v1::ContainerMetadata {
                    name: "c".into(),
                    attempt: 1,
                }),
                ..Default::default()
            }),
            sandbox_config: None,
        };
        assert_eq!(
            req.encode_to_vec(),
            vec![0x0a, 1, b'p', 0x12, 7, 0x0a, 5, 0x0a, 1, b'c', 0x10, 1]
        );
    }
}
