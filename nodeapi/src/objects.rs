//! Any object of the cluster, read, created and deleted as raw JSON with the kubeconfig's
//! identity. The status guard (crate `statusguard`) registers and removes its webhook
//! configuration so, with the operator's rights: a node's identity cannot.

use crate::client::{Call, NodeApi};
use crate::Error;

impl NodeApi {
    /// `GET path`: the object's JSON, `None` when the server has no such object (404).
    /// `what` names it in errors ("mutatingwebhookconfiguration x").
    pub fn get_object(&self, path: &str, what: &str) -> Result<Option<String>, Error> {
        match self.send(Call::get(path), "get", what, None) {
            Ok(text) => Ok(Some(text)),
            Err(Error::Unexpected { what, .. }) if what.starts_with("404") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `POST collection` with `body` (JSON): the created object as served. An object of that
    /// name already there is an error (409), never overwritten.
    pub fn create_object(
        &self,
        collection: &str,
        body: &[u8],
        what: &str,
    ) -> Result<String, Error> {
        let call = Call {
            method: "POST",
            path: collection,
            body,
            content_type: Some("application/json"),
        };
        self.send(call, "create", what, None)
    }

    /// `DELETE path`: `true` when it was deleted, `false` when there was none (404).
    pub fn delete_object(&self, path: &str, what: &str) -> Result<bool, Error> {
        let call = Call {
            method: "DELETE",
            path,
            body: &[],
            content_type: None,
        };
        match self.send(call, "delete", what, None) {
            Ok(_) => Ok(true),
            Err(Error::Unexpected { what, .. }) if what.starts_with("404") => Ok(false),
            Err(e) => Err(e),
        }
    }
}
