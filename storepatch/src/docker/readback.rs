//! The patch's read-back on Docker: the hash labels of just the rewritten `config.v2.json`
//! files, found with the byte scanner (which answers what dockerd's Go decoder reads, see
//! [`crate::jsonspan`]) instead of a full parse and classification of every file of the store.
//! `apply` has already compared every written file with the bytes it proved; this reads the
//! files again, as the runtime will, and names each label's value.

use super::{DockerStore, CONFIG_FILE, HASH_LABEL, HASH_WITHOUT_RESOURCES_LABEL};
use crate::error::StoreError;
use crate::{atomic, jsonspan, RecordKind, StoreRecord};
use rayon::prelude::*;

impl DockerStore {
    /// [`crate::RuntimeStore::read_back`] for Docker.
    pub(super) fn read_back_labels(&self, ids: &[&str]) -> Result<Vec<StoreRecord>, StoreError> {
        let containers = self.containers_dir()?;
        Ok(atomic::on_io_threads(|| {
            ids.par_iter()
                .map(|id| {
                    let path = containers.join(id).join(CONFIG_FILE);
                    let mut r =
                        StoreRecord::new(*id, RecordKind::Container, path.display().to_string());
                    r.set_hashes_read(
                        atomic::read_regular_nofollow(&path)
                            .map_err(|e| e.to_string())
                            .and_then(|(bytes, _)| labels_of(&bytes).map_err(|e| e.to_string())),
                    );
                    r
                })
                .collect()
        }))
    }
}

type Labels = (Option<String>, Option<String>);

fn labels_of(bytes: &[u8]) -> Result<Labels, jsonspan::SpanError> {
    let Some(labels) = jsonspan::object_path(bytes, &["Config", "Labels"])? else {
        return Ok((None, None));
    };
    let value = |key: &str| -> Result<Option<String>, jsonspan::SpanError> {
        match labels.get_string(key)? {
            Some(m) => Ok(Some(jsonspan::decode_string(bytes, m.value.start)?.text)),
            None => Ok(None),
        }
    };
    Ok((value(HASH_LABEL)?, value(HASH_WITHOUT_RESOURCES_LABEL)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_read_as_go_reads_them() {
        let doc = br#"{"ID":"x","Config":{"Labels":{"annotation.io.kubernetes.container.hash":"1","annotation.io.kubernetes.container.hash":"2\u0033"}}}"#;
        assert_eq!(
            labels_of(doc).unwrap(),
            (Some("23".into()), None),
            "the last duplicate, unescaped"
        );
        assert_eq!(labels_of(br#"{"Config":{}}"#).unwrap(), (None, None));
        assert!(labels_of(
            br#"{"Config":{"Labels":{"annotation.io.kubernetes.container.hash":1}}}"#
        )
        .is_err());
        assert!(labels_of(br#"{"Config":{"Labels":{"#).is_err());
    }
}
