//! Applying rewrites: every file is read, edited and proven first (nothing of the store is
//! written on any error), backed up durably, then replaced atomically, runroot copies before
//! graphroot ones, and read back; a wave of containers at a time in memory.

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
    /// Every (hash, hashWithoutResources) pair the file holds, embedded and plain.
    hash_pairs: [(Option<String>, Option<String>); 2],
    /// The runroot copy (else the graphroot one).
    runroot: bool,
}

/// The files of one rewrite ([`CrioStore::locate`]).
struct Located {
    graph: PathBuf,
    run: Option<PathBuf>,
}

/// How many containers [`CrioStore::apply_rewrites`] holds in memory at once (each up to two
/// config.json copies, original and new).
const APPLY_WAVE: usize = 128;

impl CrioStore {
    /// [`crate::RuntimeStore::apply`] once the running check and the rewrites' validation
    /// passed.
    pub(super) fn apply_rewrites(
        &self,
        rewrites: &[Rewrite],
        backup: &mut Backup,
    ) -> Result<ApplyOutcome, StoreError> {
        let mut lap = crate::Lap::start();
        // Phase 0: where every file is (the file systems to flush are opened before any write).
        let located: Vec<Located> = rewrites
            .iter()
            .map(|rw| self.locate(rw))
            .collect::<Result<_, _>>()?;
        let paths: Vec<&Path> = located
            .iter()
            .flat_map(|l| std::iter::once(l.graph.as_path()).chain(l.run.as_deref()))
            .collect();
        let mut batch = atomic::StagedBatch::open_on(&paths, self.storage.clone())?;
        if let Some(runroot) = &self.runroot {
            backup.add_root(runroot);
        }
        // Phase 1, a wave of APPLY_WAVE containers at a time: read, edit and prove each file
        // (the first error in `rewrites` order is reported, as a one-by-one plan would), copy
        // the originals into the backup's pack, stage the new bytes beside their targets, and
        // drop the wave's bytes. Nothing of the store is written on any error.
        let mut outcome = ApplyOutcome::default();
        let mut written: Vec<(PathBuf, String, u64)> = Vec::new();
        let mut pack = backup.pack();
        for (wave, wave_located) in rewrites.chunks(APPLY_WAVE).zip(located.chunks(APPLY_WAVE)) {
            let plans: Vec<Result<Vec<PlannedFile>, StoreError>> = wave
                .par_iter()
                .zip(wave_located)
                .map(|(rw, at)| self.plan_rewrite(rw, at))
                .collect();
            let mut writes: Vec<PlannedFile> = Vec::new();
            for (rw, files) in wave.iter().zip(plans) {
                let changes: Vec<PlannedFile> = files?
                    .into_iter()
                    .filter(|f| !crate::bytes::equal(&f.new, &f.original))
                    .collect();
                if changes.is_empty() {
                    outcome.already.push(rw.id.clone());
                } else {
                    outcome.changed.push(rw.id.clone());
                    writes.extend(changes);
                }
            }
            let items: Vec<backup::SaveItem> = writes
                .iter()
                .map(|f| backup::SaveItem {
                    path: &f.path,
                    original: &f.original,
                    meta: f.meta,
                    new: Some(&f.new),
                })
                .collect();
            let shas = pack.add(&items)?;
            // runc reads the runroot copy only at create time: every runroot copy is renamed
            // (wave 0) before the first graphroot copy (wave 1), so the authoritative graphroot
            // copies are the last to change.
            for (wave_index, runroot) in [(0, true), (1, false)] {
                let reps: Vec<atomic::Replacement> = writes
                    .iter()
                    .filter(|f| f.runroot == runroot)
                    .map(|f| atomic::Replacement {
                        path: &f.path,
                        bytes: &f.new,
                        meta: f.meta,
                    })
                    .collect();
                batch.stage_in_wave(wave_index, &reps)?;
            }
            for (f, sha) in writes.into_iter().zip(shas) {
                let len = f.new.len() as u64;
                written.push((f.path, sha.expect("every staged file has new bytes"), len));
            }
        }
        pack.close()?;
        lap.split("edit_and_stage", &mut outcome.phases);
        // Phase 2: the copies and the staged files made durable (one flush when they share a
        // file system), then the manifest, before the first rename.
        backup.commit()?;
        lap.split("backup_commit", &mut outcome.phases);

        // Phase 3: the renames, wave after wave on a pool of I/O threads, then syncfs
        // (atomic::StagedBatch). Every new byte is durable before the first rename, so a crash
        // leaves each file old or new.
        if !batch.is_empty() {
            batch.commit()?;
        }
        lap.split("rename", &mut outcome.phases);

        // Phase 4: re-read what was written: each file holds the bytes the backup recorded.
        let reread: Vec<Result<(), StoreError>> = atomic::on_io_threads(|| {
            written
                .par_iter()
                .map(|(path, sha, _)| {
                    let (now, _) = atomic::read_regular_nofollow(path)?;
                    if backup::sha256_hex(&now) != *sha {
                        return Err(StoreError::Verify {
                            location: path.display().to_string(),
                            reason: "the file does not hold the bytes just written".into(),
                        });
                    }
                    Ok(())
                })
                .collect()
        });
        reread.into_iter().collect::<Result<(), _>>()?;
        let sizes: HashMap<&Path, u64> = written
            .iter()
            .map(|(path, _, len)| (path.as_path(), *len))
            .collect();
        outcome.files_written = sizes.len();
        outcome.bytes_written = sizes.values().sum();
        backup.finish()?;
        lap.split("read_back", &mut outcome.phases);
        Ok(outcome)
    }

    /// Where the files of one rewrite are: the graphroot copy, checked to stay inside the
    /// graphroot, and the runroot copy when there is one.
    fn locate(&self, rw: &Rewrite) -> Result<Located, StoreError> {
        let dir = self.find_container_dir(&rw.id)?;
        let graph = dir.join("userdata").join("config.json");
        check_components(&self.graphroot, &graph)?;
        let run = self.runroot_config(&dir)?;
        Ok(Located { graph, run })
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
        let hash_pairs = a.hash_pairs();
        Ok(PlannedFile {
            path: path.to_path_buf(),
            original: bytes,
            new: new_bytes,
            meta,
            record: a.record,
            hash_pairs,
            runroot: false,
        })
    }

    /// Plans the files of one rewrite: the runroot copy (when it exists) first, then the
    /// graphroot copy, both proven; nothing is written.
    fn plan_rewrite(&self, rw: &Rewrite, at: &Located) -> Result<Vec<PlannedFile>, StoreError> {
        let graph = self.plan_file(&at.graph, &rw.id, rw)?;
        let Some(run_cfg) = &at.run else {
            return Ok(vec![graph]);
        };
        let mut run = self.plan_file(run_cfg, &rw.id, rw)?;
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
        // Every value of the runroot copy counts, its plain annotations too.
        let target = |f: &PlannedFile| {
            f.hash_pairs.iter().all(|(h, w)| {
                (
                    Some(rw.hash.to_string()),
                    rw.hash_without_resources
                        .map(|h| h.to_string())
                        .or_else(|| f.record.hash_without_resources.clone()),
                ) == (h.clone(), w.clone())
            })
        };
        let graph_pair = (g.hash.clone(), g.hash_without_resources.clone());
        if let Some((other, _)) = run.hash_pairs.iter().find(|p| **p != graph_pair) {
            if !target(&run) && !target(&graph) {
                return Err(StoreError::Refused(format!(
                    "{}: the runroot copy of container {} holds hash {} where the graphroot copy holds {}: unproven, never rewritten",
                    run_cfg.display(),
                    rw.id,
                    other.as_deref().unwrap_or("(none)"),
                    g.hash.as_deref().unwrap_or("(none)")
                )));
            }
        }
        run.runroot = true;
        Ok(vec![run, graph])
    }
}
