//! The registry: the one place that names every runtime back-end. What differs between
//! runtimes beyond their store format is each back-end's [`Runtime`] descriptor (names,
//! default roots and endpoints, how a root is recognised, how a store is opened, how a running
//! runtime is asked about its containers); this module maps a [`RuntimeKind`] to it, detects
//! the runtime of a root, and finds a store with the node's layouts ([`crate::layout`], the
//! registry's other half).
//!
//! Callers (the `rehash` workflow, the CLI) only ever hold a [`RuntimeKind`] and a
//! `Box<dyn RuntimeStore>`; every `match` on the kind lives here. The back-ends import the
//! contract ([`crate::contract`]), never this module. Adding a runtime is a back-end module,
//! a [`RuntimeKind`] variant and its arm in [`RuntimeKind::runtime`], and its layouts.

pub use crate::contract::{unix_endpoint, validate, LiveContainer, Runtime, StoreOptions};
use crate::RuntimeKind;

impl RuntimeKind {
    /// Every runtime, in detection order.
    pub const ALL: [RuntimeKind; 3] = [
        RuntimeKind::Containerd,
        RuntimeKind::Docker,
        RuntimeKind::Crio,
    ];

    /// The runtime's descriptor.
    pub fn runtime(self) -> &'static dyn Runtime {
        match self {
            RuntimeKind::Docker => &crate::docker::runtime::DOCKER,
            RuntimeKind::Containerd => &crate::containerd::runtime::CONTAINERD,
            RuntimeKind::Crio => &crate::crio::runtime::CRIO,
        }
    }

    /// The names an operator may use for this runtime (the first is canonical).
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            RuntimeKind::Docker => &["docker", "dockershim", "cri-dockerd"],
            RuntimeKind::Containerd => &["containerd"],
            RuntimeKind::Crio => &["crio", "cri-o"],
        }
    }
}

/// `--runtime` spelled in a way we do not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown runtime {0:?}: expected one of {names}", names = RuntimeKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownRuntime(pub String);

impl std::str::FromStr for RuntimeKind {
    type Err = UnknownRuntime;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RuntimeKind::ALL
            .into_iter()
            .find(|k| k.aliases().contains(&s))
            .ok_or_else(|| UnknownRuntime(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{locate, DetectError};
    use crate::Rewrite;
    use hashcompat::Hash;

    #[test]
    fn every_alias_parses_to_its_runtime() {
        for k in RuntimeKind::ALL {
            assert_eq!(
                k.aliases()[0],
                k.name(),
                "the first alias is the canonical name"
            );
            for a in k.aliases() {
                assert_eq!(a.parse::<RuntimeKind>(), Ok(k), "alias {a}");
            }
        }
        assert!("podman".parse::<RuntimeKind>().is_err());
    }

    #[test]
    fn duplicate_ids_are_refused_even_when_identical() {
        let rw = |id: &str, h| Rewrite {
            id: id.into(),
            hash: Hash(h),
            hash_without_resources: None,
        };
        assert!(validate(&[rw("a", 1), rw("b", 1)]).is_ok());
        for batch in [vec![rw("a", 1), rw("a", 1)], vec![rw("a", 1), rw("a", 2)]] {
            let e = validate(&batch).expect_err("a duplicate id must be refused");
            assert!(
                e.is_refusal(),
                "duplicates are a refusal, not a failure: {e}"
            );
        }
    }

    #[test]
    fn locate_detects_each_layout_and_names_what_is_missing() {
        let d = tempfile::tempdir().unwrap();
        let e = locate(None, Some(d.path())).expect_err("an empty dir is no store");
        let msg = e.to_string();
        for k in RuntimeKind::ALL {
            assert!(
                msg.contains(&k.runtime().layout_hint()),
                "message names what a {} root holds: {msg}",
                k.name()
            );
        }
        std::fs::create_dir(d.path().join("containers")).unwrap();
        assert_eq!(locate(None, Some(d.path())).unwrap().0, RuntimeKind::Docker);
        let e = locate(Some(RuntimeKind::Containerd), Some(d.path()))
            .expect_err("a Docker root is no containerd root");
        assert!(
            matches!(e, DetectError::RuntimeMismatch { .. })
                && e.to_string().contains("looks like a docker root"),
            "{e}"
        );
        let gone = d.path().join("gone");
        assert!(matches!(
            locate(Some(RuntimeKind::Docker), Some(&gone)),
            Err(DetectError::RootMissing(_))
        ));
    }
}
