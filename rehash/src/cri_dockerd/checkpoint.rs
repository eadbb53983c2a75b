//! The pod sandbox checkpoint dockershim kept in `/var/lib/dockershim/sandbox/<sandbox id>` and
//! cri-dockerd keeps in `<root>/sandbox/<sandbox id>`: the same JSON document, but not the
//! same checksum.
//!
//! Both compute `checksum` as FNV-32a over go-spew's `%#v` of the `data` field (kubelet
//! `hashutil.DeepHashObject`), and `%#v` names the Go types: dockershim's are
//! `dockershim.CheckpointData` / `dockershim.PortMapping` / `dockershim.Protocol`, cri-dockerd's
//! `core.CheckpointData` / `config.PortMapping` / `config.Protocol` (cri-dockerd 0.4.1
//! `core/checkpoint.go`, `store/checksum.go`). A dockershim checkpoint copied byte for byte
//! fails cri-dockerd's `VerifyChecksum`: at its first use (`GetPodPortMappings`, in the CNI
//! teardown of StopPodSandbox) cri-dockerd logs "checkpoint is corrupted" and deletes it, and
//! the sandbox's hostPort mappings are never unmapped (shown on the real cri-dockerd in
//! cli/tests/cri_dockerd_live.rs). The copy therefore gets the checksum cri-dockerd computes;
//! the rest of the document is the same. The values below were checked
//! against go-spew itself (the generator is `tools/cri-dockerd-checksum/`).

use serde::{Deserialize, Serialize};

/// One port mapping of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortMapping {
    /// `protocol` (a `*Protocol`: absent is nil).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// `container_port` (a `*int32`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_port: Option<i32>,
    /// `host_port` (a `*int32`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    /// `host_ip` (a string; `omitempty`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// `data` of a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointData {
    /// `port_mappings`: `None` is a nil slice (absent), `Some(vec![])` an empty one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_mappings: Option<Vec<PortMapping>>,
    /// `host_network`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub host_network: bool,
}

/// A sandbox checkpoint, as both write it (`json.Marshal` of `PodSandboxCheckpoint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxCheckpoint {
    /// `version` (`v1`).
    pub version: String,
    /// The pod's name.
    pub name: String,
    /// The pod's namespace.
    pub namespace: String,
    /// Port mappings and host network.
    #[serde(default)]
    pub data: CheckpointData,
    /// FNV-32a of go-spew's `%#v` of `data`.
    pub checksum: u64,
}

/// Whose Go types name the checksum's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// The kubelet's dockershim from 1.18 on (`PortMapping` with `HostIP`).
    Dockershim,
    /// dockershim before `HostIP` existed in its `PortMapping` (kubelet ≤ 1.17).
    DockershimNoHostIp,
    /// cri-dockerd (`core.CheckpointData`, `config.PortMapping`).
    CriDockerd,
}

/// go-spew's `%#v` (SortKeys, DisableMethods, SpewKeys) of `data` as `flavor`'s Go types.
pub fn spew(data: &CheckpointData, flavor: Flavor) -> String {
    let (data_type, pm_type, proto_type) = match flavor {
        Flavor::Dockershim | Flavor::DockershimNoHostIp => (
            "dockershim.CheckpointData",
            "dockershim.PortMapping",
            "dockershim.Protocol",
        ),
        Flavor::CriDockerd => (
            "core.CheckpointData",
            "config.PortMapping",
            "config.Protocol",
        ),
    };
    let mut s = format!("({data_type}){{PortMappings:([]*{pm_type})");
    match &data.port_mappings {
        None => s.push_str("<nil>"),
        Some(list) => {
            s.push('[');
            for (i, pm) in list.iter().enumerate() {
                if i > 0 {
                    s.push(' ');
                }
                s.push_str("<*>{Protocol:");
                match &pm.protocol {
                    Some(p) => s.push_str(&format!("(*{proto_type}){p}")),
                    None => s.push_str(&format!("(*{proto_type})<nil>")),
                }
                let int = |v: Option<i32>| match v {
                    Some(v) => format!("(*int32){v}"),
                    None => "(*int32)<nil>".to_string(),
                };
                s.push_str(&format!(
                    " ContainerPort:{} HostPort:{}",
                    int(pm.container_port),
                    int(pm.host_port)
                ));
                if flavor != Flavor::DockershimNoHostIp {
                    s.push_str(&format!(" HostIP:(string){}", pm.host_ip));
                }
                s.push('}');
            }
            s.push(']');
        }
    }
    s.push_str(&format!(" HostNetwork:(bool){}}}", data.host_network));
    s
}

/// FNV-32a, as Go's `hash/fnv.New32a`.
fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The checksum `flavor` computes for `data`.
pub fn checksum(data: &CheckpointData, flavor: Flavor) -> u64 {
    u64::from(fnv32a(spew(data, flavor).as_bytes()))
}

/// What a checkpoint file's checksum says about who wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// dockershim (either of its type layouts).
    Dockershim,
    /// cri-dockerd (already converted).
    CriDockerd,
    /// Neither: the file was changed after it was written.
    Unknown,
}

impl SandboxCheckpoint {
    /// Parses a checkpoint file; the error says what is wrong with it.
    pub fn parse(bytes: &[u8]) -> Result<SandboxCheckpoint, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a sandbox checkpoint: {e}"))
    }

    /// Who computed the stored checksum.
    pub fn writer(&self) -> Writer {
        if self.checksum == checksum(&self.data, Flavor::CriDockerd) {
            Writer::CriDockerd
        } else if self.checksum == checksum(&self.data, Flavor::Dockershim)
            || self.checksum == checksum(&self.data, Flavor::DockershimNoHostIp)
        {
            Writer::Dockershim
        } else {
            Writer::Unknown
        }
    }

    /// The document with the checksum cri-dockerd computes, as cri-dockerd writes it.
    pub fn for_cri_dockerd(&self) -> Vec<u8> {
        let mut c = self.clone();
        // cri-dockerd reads `[]` and an absent list differently (go-spew: `[]` vs `<nil>`);
        // keep what the file says, and checksum exactly that.
        c.checksum = checksum(&c.data, Flavor::CriDockerd);
        serde_json::to_vec(&c).expect("a checkpoint always serializes")
    }

    /// The document with the checksum dockershim computes (what kubelet 1.23 left on a node).
    pub fn for_dockershim(&self) -> Vec<u8> {
        let mut c = self.clone();
        c.checksum = checksum(&c.data, Flavor::Dockershim);
        serde_json::to_vec(&c).expect("a checkpoint always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pm(p: Option<&str>, c: Option<i32>, h: Option<i32>, ip: &str) -> PortMapping {
        PortMapping {
            protocol: p.map(String::from),
            container_port: c,
            host_port: h,
            host_ip: ip.into(),
        }
    }

    /// Golden values from go-spew and hash/fnv themselves (tools/cri-dockerd-checksum, run
    /// against cri-dockerd 0.4.1's vendored go-spew with a `dockershim` package declaring
    /// dockershim's types).
    #[test]
    fn checksums_match_go_spew() {
        let cases = [
            (CheckpointData::default(), 2305795928u64, 815459779u64),
            (
                CheckpointData {
                    host_network: true,
                    ..Default::default()
                },
                12315789,
                996107268,
            ),
            (
                CheckpointData {
                    port_mappings: Some(vec![pm(Some("TCP"), Some(80), Some(8080), "1.2.3.4")]),
                    host_network: false,
                },
                2181806599,
                142289639,
            ),
            (
                CheckpointData {
                    port_mappings: Some(vec![
                        pm(Some("TCP"), Some(80), Some(8080), ""),
                        pm(Some("UDP"), Some(53), Some(0), ""),
                        pm(None, Some(80), None, ""),
                    ]),
                    host_network: true,
                },
                1514908441,
                1731429101,
            ),
        ];
        for (data, cri_dockerd, dockershim) in cases {
            assert_eq!(checksum(&data, Flavor::CriDockerd), cri_dockerd, "{data:?}");
            assert_eq!(checksum(&data, Flavor::Dockershim), dockershim, "{data:?}");
        }
        assert_eq!(
            spew(
                &CheckpointData {
                    port_mappings: Some(vec![pm(Some("TCP"), Some(80), Some(8080), "1.2.3.4")]),
                    host_network: false
                },
                Flavor::CriDockerd
            ),
            "(core.CheckpointData){PortMappings:([]*config.PortMapping)[<*>{Protocol:(*config.Protocol)TCP ContainerPort:(*int32)80 HostPort:(*int32)8080 HostIP:(string)1.2.3.4}] HostNetwork:(bool)false}"
        );
    }

    #[test]
    fn conversion_keeps_everything_but_the_checksum() {
        let doc = br#"{"version":"v1","name":"web","namespace":"shop","data":{"port_mappings":[{"protocol":"TCP","container_port":80,"host_port":8080}],"host_network":true},"checksum":0}"#;
        let mut cp = SandboxCheckpoint::parse(doc).unwrap();
        cp.checksum = checksum(&cp.data, Flavor::Dockershim);
        assert_eq!(cp.writer(), Writer::Dockershim);
        let out = SandboxCheckpoint::parse(&cp.for_cri_dockerd()).unwrap();
        assert_eq!(out.writer(), Writer::CriDockerd);
        assert_eq!((out.name.as_str(), &out.data), ("web", &cp.data));
        cp.checksum += 1;
        assert_eq!(cp.writer(), Writer::Unknown);
        assert!(SandboxCheckpoint::parse(b"{not json").is_err());
    }
}
