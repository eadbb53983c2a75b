//! Why the API server could not be asked, in words an operator acts on.

use std::path::PathBuf;

/// How the command line reports an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The kubeconfig or a file it names is missing or malformed: exit 2.
    Usage,
    /// The API server was not reached, not trusted, or refused the identity: exit 5.
    Api,
    /// The API server does not know the node: exit 3, as for a foreign pods file.
    Refused,
}

/// Why a question to the API server got no answer. None of them changes anything.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig cannot be read or used.
    #[error("kubeconfig {path}: {what}")]
    Kubeconfig {
        /// The kubeconfig.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A file the kubeconfig names (certificate, key, CA, token) cannot be read or parsed.
    #[error("kubeconfig {kubeconfig}: {field} {path}: {what}")]
    Credential {
        /// The kubeconfig.
        kubeconfig: PathBuf,
        /// The kubeconfig field naming it (`client-certificate`, ...).
        field: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The client certificate is outside its validity period (checked before connecting: the
    /// API server would answer 401 without saying why).
    #[error("the client certificate of {identity} ({path}) {when}: the API server will not accept it; the kubelet rotates its certificate (kubelet-client-current.pem) while it runs and can reach the API server: check the node's clock and the kubelet's certificate rotation")]
    CertificateNotValid {
        /// The certificate's identity.
        identity: String,
        /// Where it was read.
        path: String,
        /// "expired at ..." or "is not valid before ...".
        when: String,
    },
    /// No connection to the API server.
    #[error("API server {server} unreachable after {attempts} attempts: {cause}")]
    Unreachable {
        /// The server URL.
        server: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        cause: String,
    },
    /// TLS failed: the server's certificate is not signed by the CA the kubeconfig names, or
    /// the server refused the client certificate during the handshake.
    #[error("TLS with API server {server} failed: {cause} (the kubeconfig's certificate-authority {ca} does not vouch for the server, or the server rejects the client certificate)")]
    Tls {
        /// The server URL.
        server: String,
        /// Where the CA came from.
        ca: String,
        /// The TLS error.
        cause: String,
    },
    /// 401: the API server does not authenticate the credential.
    #[error("API server {server} does not accept the credential of {identity} (401 Unauthorized: {message}); a certificate from another cluster's CA, a revoked or rotated-out one, or a wrong token")]
    Unauthorized {
        /// The server URL.
        server: String,
        /// Who we claimed to be.
        identity: String,
        /// The server's message.
        message: String,
    },
    /// 403: authenticated, but not allowed.
    #[error("API server {server} forbids {identity} to {verb} {resource} (403 Forbidden: {message}); the node's own identity may read only its own pods and Node: is --node-name this node's name?")]
    Forbidden {
        /// The server URL.
        server: String,
        /// Who we are.
        identity: String,
        /// The verb (get, list).
        verb: &'static str,
        /// What was asked for.
        resource: String,
        /// The server's message.
        message: String,
    },
    /// The API server knows no Node of that name.
    #[error("API server {server} has no Node named {name}: give this node's name with --node-name (as `kubectl get nodes` lists it)")]
    NodeNotFound {
        /// The server URL.
        server: String,
        /// The name asked for.
        name: String,
    },
    /// A node's own identity asked for another node (the Node authorizer's 403): the pods
    /// would be another node's, which the plan refuses as it refuses a foreign pods file.
    #[error("API server {server}: the credential is node {own}'s own (system:node:{own}), which may read only Node {own} and its pods, not {name}'s: --node-name {name} is not this node, or the kubeconfig is another node's")]
    NotThisNode {
        /// The server URL.
        server: String,
        /// The node asked for.
        name: String,
        /// The node the credential belongs to.
        own: String,
    },
    /// A pod of the listing is bound to another node: the plan would rewrite this node's
    /// store after another node's pods (exit 3, as for a foreign pods file).
    #[error("API server {server} listed pod {pod} of node {other:?} among the pods of node {node}: refused, the plan is made only from this node's own pods")]
    OtherNodesPod {
        /// The server URL.
        server: String,
        /// The node asked for.
        node: String,
        /// The pod (`namespace/name`, escaped).
        pod: String,
        /// The node it is bound to (escaped).
        other: String,
    },
    /// An answer or a listing larger than any real node's (an endless body): cut off there.
    #[error(
        "API server {server}: {what} exceeds {limit} bytes, far more than any node's pods: refused"
    )]
    TooLarge {
        /// The server URL.
        server: String,
        /// What was being read.
        what: String,
        /// The bound, bytes.
        limit: usize,
    },
    /// The request's guard said no more attempts may be made (the hold's conditions no longer
    /// stand): nothing further was sent.
    #[error("API server {server}: request stopped: {why}")]
    Stopped {
        /// The server URL.
        server: String,
        /// Why.
        why: String,
    },
    /// Any other answer.
    #[error("API server {server}: {method} {path}: {what}")]
    Unexpected {
        /// The server URL.
        server: String,
        /// The request's method.
        method: &'static str,
        /// The request path.
        path: String,
        /// What came back.
        what: String,
    },
}

impl Error {
    /// How the command line reports it.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Kubeconfig { .. } | Error::Credential { .. } => ErrorClass::Usage,
            Error::NodeNotFound { .. }
            | Error::NotThisNode { .. }
            | Error::OtherNodesPod { .. } => ErrorClass::Refused,
            Error::CertificateNotValid { .. }
            | Error::Unreachable { .. }
            | Error::Tls { .. }
            | Error::Unauthorized { .. }
            | Error::Forbidden { .. }
            | Error::TooLarge { .. }
            | Error::Stopped { .. }
            | Error::Unexpected { .. } => ErrorClass::Api,
        }
    }
}
