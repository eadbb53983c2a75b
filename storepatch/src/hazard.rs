//! Hazards: what an operator must know (or fix) before the window, each with a stable code so
//! fleet tooling acts on `code` and `severity` instead of parsing sentences. A store's scan
//! reports its own ([`crate::ScanReport::warnings`]); the workflow above adds those of the
//! versions, the pods and the node, and reports them all alike. The codes are listed in
//! docs/report.md; a code is never reused for another meaning.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// How much a hazard weighs for the patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Shown; the patch goes on (the operator decides).
    Warn,
    /// The patch refuses (nothing written) until the operator has dealt with it.
    Block,
}

/// One hazard. Its JSON form is the report's `hazards[]` (docs/report.md), a stable contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hazard {
    /// Stable, kebab-case: `docker-live-restore-unknown`, `crio-version-file-missing`, ….
    /// Owned, not `&'static str`: a report read back ([`Deserialize`]) carries its codes.
    pub code: String,
    /// `block`: `patch` refuses (exit 3, nothing written) until it is dealt with; `warn`: shown.
    pub severity: Severity,
    /// What it means and what to do, for a human.
    pub message: String,
    /// The files it is about (may be empty).
    #[serde(default)]
    pub files: Vec<String>,
    /// The container (or sandbox) ids it is about (may be empty).
    #[serde(default)]
    pub containers: Vec<String>,
    /// Where the upstream behaviour is documented (issue, changelog, source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

impl Hazard {
    /// A `warn` hazard.
    pub fn warn(code: &str, message: impl Into<String>) -> Self {
        Hazard {
            code: code.to_string(),
            severity: Severity::Warn,
            message: message.into(),
            files: Vec::new(),
            containers: Vec::new(),
            reference: None,
        }
    }

    /// A `block` hazard.
    pub fn block(code: &str, message: impl Into<String>) -> Self {
        Hazard {
            severity: Severity::Block,
            ..Hazard::warn(code, message)
        }
    }

    /// The same hazard, naming a file.
    pub fn about(mut self, file: &Path) -> Self {
        self.files.push(file.display().to_string());
        self
    }

    /// The same hazard, naming containers.
    pub fn containers(mut self, ids: impl IntoIterator<Item = String>) -> Self {
        self.containers.extend(ids);
        self
    }

    /// The same hazard, naming the upstream reference.
    pub fn reference(mut self, r: &str) -> Self {
        self.reference = Some(r.to_string());
        self
    }
}
