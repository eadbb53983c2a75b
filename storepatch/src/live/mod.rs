//! Clients for running runtimes, used to check what a runtime reports after a rewrite.

#[cfg(feature = "live")]
pub mod cri;

pub mod docker;

pub(crate) mod cri_runtime;
