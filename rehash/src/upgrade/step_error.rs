//! Why a step failed, kept typed until it is written down: the node's own errors
//! ([`NodeError`]) and the workflow's ([`Error`]) keep their [`ErrorClass`] and their source
//! through the window and going back; only the state file and the result turn them into the
//! cause string a later run and an operator read.

use crate::error::{Error, ErrorClass};
use storepatch::StoreError;

/// Why the node's service control or process view said no ([`super::NodeControl`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NodeError {
    class: ErrorClass,
    message: String,
}

impl NodeError {
    /// Something broke: a service command failed, could not run, or hung.
    pub fn failure(message: impl Into<String>) -> Self {
        NodeError {
            class: ErrorClass::Failure,
            message: message.into(),
        }
    }

    /// The node is not safe to go on with (a runtime whose stop kills its containers).
    pub fn refused(message: impl Into<String>) -> Self {
        NodeError {
            class: ErrorClass::Refused,
            message: message.into(),
        }
    }

    /// The class a caller acts on.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// What the node said, as the state file records it.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A bare message is a failure: what a service command printed when it failed.
impl std::convert::From<String> for NodeError {
    fn from(message: String) -> Self {
        NodeError::failure(message)
    }
}

impl std::convert::From<&str> for NodeError {
    fn from(message: &str) -> Self {
        NodeError::failure(message)
    }
}

/// Why a step of the window, or of going back, failed. Its text is the cause the state file
/// records, exactly as the error it came from says it.
#[derive(Debug, thiserror::Error)]
pub(super) enum StepError {
    /// The node's service control said no.
    #[error(transparent)]
    Node(#[from] NodeError),
    /// The workflow (plan, patch, rollback, verify) or the store said no.
    #[error(transparent)]
    Workflow(Box<Error>),
    /// A check of the window's own did not hold.
    #[error("{message}")]
    Check {
        /// What kind of "no".
        class: ErrorClass,
        /// What did not hold.
        message: String,
    },
}

impl StepError {
    /// A check that found something broken (a service that did not stop or start in time).
    pub(super) fn failure(message: impl Into<String>) -> Self {
        StepError::Check {
            class: ErrorClass::Failure,
            message: message.into(),
        }
    }

    /// A check that found the node not as the preflight saw it: going on is refused.
    pub(super) fn refused(message: impl Into<String>) -> Self {
        StepError::Check {
            class: ErrorClass::Refused,
            message: message.into(),
        }
    }

    /// The operator's SIGINT/SIGTERM inside the window: going back is asked for.
    pub(super) fn interrupted() -> Self {
        StepError::refused("interrupted (SIGINT/SIGTERM): going back to a safe state")
    }

    /// The class a caller acts on.
    pub(super) fn class(&self) -> ErrorClass {
        match self {
            StepError::Node(e) => e.class(),
            StepError::Workflow(e) => e.class(),
            StepError::Check { class, .. } => *class,
        }
    }
}

impl std::convert::From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Workflow(Box::new(e))
    }
}

impl std::convert::From<StoreError> for StepError {
    fn from(e: StoreError) -> Self {
        Error::Store(e).into()
    }
}
