//! The patch's read-back on Docker: the hash labels of just the rewritten `config.v2.json`
//! files, found with the byte scanner (which answers what dockerd's Go decoder reads, see
//! [`crate::jsonspan`]) instead of a full parse and classification of every file of the store.
//! `apply` has already compared every written file with the bytes it proved, after the
//! renames, and read their labels with this same scanner: the files it wrote are answered from
//! that read (nothing can have changed them since: dockerd is stopped and the store locked);
//! any other id is read from disk, as the runtime will read it.

use super::{DockerStore, CONFIG_FILE, HASH_LABEL, HASH_WITHOUT_RESOURCES_LABEL};
use crate::error::StoreError;
use crate::{atomic, jsonspan, RecordKind, StoreRecord};
use rayon::prelude::*;

impl DockerStore {
    /// [`crate::RuntimeStore::read_back`] for Docker.
    pub(super) fn read_back_labels(&self, ids: &[&str]) -> Result<Vec<StoreRecord>, StoreError> {
        let containers = self.containers_dir()?;
        let written = std::mem::take(
            &mut *self
                .read_after_write
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        Ok(atomic::on_io_threads(|| {
            ids.par_iter()
                .map(|id| {
                    let path = containers.join(id).join(CONFIG_FILE);
                    let mut r =
                        StoreRecord::new(*id, RecordKind::Container, path.display().to_string());
                    r.set_hashes_read(match written.get(*id) {
                        Some(labels) => Ok(labels.clone()),
                        None => atomic::read_regular_nofollow(&path)
                            .map_err(|e| e.to_string())
                            .and_then(|(bytes, _)| labels_of(&bytes).map_err(|e| e.to_string())),
                    });
                    r
                })
                .collect()
        }))
    }
}

/// The values of the hash and hash-without-resources labels.
pub(super) type Labels = (Option<String>, Option<String>);

/// The hash labels of a `config.v2.json`, as dockerd's decoder reads them.
pub(super) fn labels_of(bytes: &[u8]) -> Result<Labels, jsonspan::SpanError> {
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
