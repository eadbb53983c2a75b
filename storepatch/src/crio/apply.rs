//! Applying rewrites: every file is read, edited and proven first (nothing is written on any
//! error), backed up durably, then replaced atomically, runroot copies before graphroot ones,
//! and read back.

use super::classify::analyse;
use super::edit::{apply_edit, verify_edit};
use super::layout::check_components;
use super::{CrioStore, CRIO_ANNOTATIONS};
use crate::atomic::{self, FileMeta};
use crate::backup::{self, Backup};
use crate::{ApplyOutcome, RecordKind, Rewrite, StoreError, StoreRecord, HASH_ANNOTATION};
use rayon::prelude::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

struct PlannedFile {
    path: PathBuf,
    original: Vec<u8>,
    new: Vec<u8>,
    meta: FileMeta,
    record: StoreRecord,
    /// The runroot copy (else the graphroot one).
    runroot: bool,
}

impl CrioStore {
    /// [`crate::RuntimeStore::apply`] once the running check and the rewrites' validation
    /// passed.
    pub(super) fn apply_rewrites(
        &self,
        rewrites: &[Rewrite],
        backup: &mut Backup,
    ) -> Result<ApplyOutcome, StoreError> {
        // Phase 1: read, edit and prove every file; nothing is written on any error. Files are
        // planned in parallel; the first error in `rewrites` order is reported, as a
        // one-by-one plan would.
        let plans: Vec<Result<Vec<PlannedFile>, StoreError>> = rewrites
            .par_iter()
            .map(|rw| self.plan_rewrite(rw))
            .collect();
        let mut outcome = ApplyOutcome::default();
        let mut writes: Vec<PlannedFile> = Vec::new();
        for (rw, files) in rewrites.iter().zip(plans) {
            let changes: Vec<PlannedFile> =
                files?.into_iter().filter(|f| f.new != f.original).collect();
            if changes.is_empty() {
                outcome.already.push(rw.id.clone());
            } else {
                outcome.changed.push(rw.id.clone());
                writes.extend(changes);
            }
        }

        // Phase 2: back up every file, durably, before the first write.
        let items: Vec<backup::SaveItem> = writes
            .iter()
            .map(|f| backup::SaveItem {
                path: &f.path,
                original: &f.original,
                meta: f.meta,
                new: Some(&f.new),
            })
            .collect();
        if let Some(runroot) = &self.runroot {
            backup.add_root(runroot);
        }
        backup.save_many(&items)?;
        backup.commit()?;

        // Phase 3: stage every new file without a per-file fsync (a full disk fails here and
        // changes nothing), make them all durable with one syncfs per file system, rename them
        // on a pool of I/O threads, syncfs again (atomic::replace_many_in_waves). Every new
        // byte is durable before the first rename, so a crash leaves each file old or new.
        // runc reads the runroot copy only at create time: every runroot copy is renamed
        // before the first graphroot copy, so the authoritative graphroot copies are the last
        // to change.
        let mut run_wave = Vec::new();
        let mut graph_wave = Vec::new();
        for f in &writes {
            let r = atomic::Replacement {
                path: &f.path,
                bytes: &f.new,
                meta: f.meta,
            };
            if f.runroot {
                run_wave.push(r);
            } else {
                graph_wave.push(r);
            }
        }
        atomic::replace_many_in_waves(&[&run_wave, &graph_wave])?;

        // Phase 4: re-read what was written.
        let reread: Vec<Result<(), StoreError>> = writes
            .par_iter()
            .map(|f| {
                let (now, _) = atomic::read_regular_nofollow(&f.path)?;
                if now != f.new {
                    return Err(StoreError::Verify {
                        location: f.path.display().to_string(),
                        reason: "the file does not hold the bytes just written".into(),
                    });
                }
                Ok(())
            })
            .collect();
        reread.into_iter().collect::<Result<(), _>>()?;
        let written: HashMap<&Path, u64> = writes
            .iter()
            .map(|f| (f.path.as_path(), f.new.len() as u64))
            .collect();
        outcome.files_written = written.len();
        outcome.bytes_written = written.values().sum();
        backup.finish()?;
        Ok(outcome)
    }

    /// Reads, analyses and edits one config.json (graphroot or runroot copy) for `rw`.
    fn plan_file(&self, path: &Path, id: &str, rw: &Rewrite) -> Result<PlannedFile, StoreError> {
        let location = path.display().to_string();
        let (bytes, meta) = atomic::read_regular_nofollow(path)?;
        let a = analyse(id, &location, &bytes);
        let refuse = |reason: String| StoreError::Refused(format!("{location}: {reason}"));
        match a.record.kind {
            RecordKind::Container => {}
            RecordKind::Undecodable => {
                return Err(refuse(format!(
                    "container {id} is undecodable ({}); it is never written",
                    a.record.problem.as_deref().unwrap_or("unknown reason")
                )))
            }
            ref k => {
                return Err(refuse(format!(
                    "record {id} is a {k:?}, not a kubelet container; nothing to rewrite"
                )))
            }
        }
        let edit = a
            .edit
            .as_ref()
            .expect("a container analysis carries edit spans");
        if edit.inner[0].is_none() {
            return Err(refuse(format!(
                "container {id} has no {HASH_ANNOTATION} inside {CRIO_ANNOTATIONS}; refusing to add one"
            )));
        }
        let (new_hash, new_hwr) = (
            rw.hash.to_string(),
            rw.hash_without_resources.map(|h| h.to_string()),
        );
        let new_values = [Some(new_hash.as_str()), new_hwr.as_deref()];
        let new_bytes = apply_edit(&bytes, edit, &new_values).map_err(|e| StoreError::Verify {
            location: location.clone(),
            reason: e.to_string(),
        })?;
        verify_edit(&a, &bytes, &new_bytes, &new_values, id, &location)?;
        Ok(PlannedFile {
            path: path.to_path_buf(),
            original: bytes,
            new: new_bytes,
            meta,
            record: a.record,
            runroot: false,
        })
    }

    /// Plans the files of one rewrite: the runroot copy (when it exists) first, then the
    /// graphroot copy, both proven; nothing is written.
    fn plan_rewrite(&self, rw: &Rewrite) -> Result<Vec<PlannedFile>, StoreError> {
        let dir = self.find_container_dir(&rw.id)?;
        let cfg = dir.join("userdata").join("config.json");
        check_components(&self.graphroot, &cfg)?;
        let graph = self.plan_file(&cfg, &rw.id, rw)?;
        let Some(run_cfg) = self.runroot_config(&dir)? else {
            return Ok(vec![graph]);
        };
        let mut run = self.plan_file(&run_cfg, &rw.id, rw)?;
        let (g, r) = (&graph.record, &run.record);
        if (&g.pod_uid, &g.container, g.attempt) != (&r.pod_uid, &r.container, r.attempt) {
            return Err(StoreError::Corrupt {
                location: run_cfg.display().to_string(),
                reason: format!(
                    "the runroot copy names pod uid {:?} container {:?} attempt {:?}, the graphroot copy {:?} {:?} {:?}",
                    r.pod_uid, r.container, r.attempt, g.pod_uid, g.container, g.attempt
                ),
            });
        }
        // A runroot copy holding other hashes than the graphroot copy, while neither holds
        // the target's, is left alone: which spec the container was created from is unknown,
        // and writing the target would hide that (the plan makes such a container unproven).
        // Either copy at the target is a patch to finish: the runroot copy alone (one
        // interrupted after its runroot wave), or the graphroot copy alone (one that did not
        // know the runroot; the plan proved the runroot copy's hash for the current kubelet).
        // (a hashWithoutResources the rewrite does not set stays as it is)
        let target = |rec: &StoreRecord| {
            (
                Some(rw.hash.to_string()),
                rw.hash_without_resources
                    .map(|h| h.to_string())
                    .or_else(|| rec.hash_without_resources.clone()),
            ) == (rec.hash.clone(), rec.hash_without_resources.clone())
        };
        if (&r.hash, &r.hash_without_resources) != (&g.hash, &g.hash_without_resources)
            && !target(r)
            && !target(g)
        {
            return Err(StoreError::Refused(format!(
                "{}: the runroot copy of container {} holds hash {} where the graphroot copy holds {}: unproven, never rewritten",
                run_cfg.display(),
                rw.id,
                r.hash.as_deref().unwrap_or("(none)"),
                g.hash.as_deref().unwrap_or("(none)")
            )));
        }
        run.runroot = true;
        Ok(vec![run, graph])
    }
}
