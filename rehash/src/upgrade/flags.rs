//! The kubelet's flags across the dockershim → cri-dockerd switch, in the window: planned in
//! the preflight (which files, what they become, and whether that covers every removed flag
//! the running kubelet has), rewritten after the binary's install with the originals in the
//! backup, put back when going back. Only for a plan that switches
//! ([`crate::cri_dockerd::plan_switch`]); every other upgrade leaves the flags alone.

use super::preflight::Preflight;
use super::run::Run;
use super::state::FlagsFileRecord;
use super::step_error::StepError;
use crate::cri_dockerd::flags::{edit_flags_file, removed_in, translate_args};
use crate::cri_dockerd::{self, CRI_DOCKERD_SOCKET, KUBELET_FLAG_FILES};
use crate::plan::Plan;
use std::path::{Path, PathBuf};
use storepatch::atomic::{read_regular_nofollow, replace_file, FileMeta};

/// Which kubelet flag files a switching `upgrade` rewrites.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KubeletFlags {
    /// The node's own: kubeadm's `/var/lib/kubelet/kubeadm-flags.env`, `/etc/default/kubelet`,
    /// `/etc/sysconfig/kubelet` (under the host root), those that exist.
    #[default]
    NodeFiles,
    /// These files (`--kubelet-flags-file`); the first gets the new flags when none of them
    /// sets any flag yet.
    Files(Vec<PathBuf>),
    /// None: the operator's configuration management gives the new kubelet its flags
    /// (`--keep-kubelet-flags`); the new binary is then checked with the running kubelet's
    /// command line as it is.
    Keep,
}

fn read_text(path: &Path) -> Result<(Vec<u8>, FileMeta, String), String> {
    let (bytes, meta) = read_regular_nofollow(path).map_err(|e| e.to_string())?;
    let text = String::from_utf8(bytes.clone())
        .map_err(|_| format!("{}: not a text file", path.display()))?;
    Ok((bytes, meta, text))
}

impl Run<'_> {
    /// The node endpoint the new kubelet is given for cri-dockerd (the node's own path, not
    /// one under a Job's host mount).
    fn kubelet_endpoint(&self) -> String {
        self.opts
            .cri_dockerd
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("unix://{CRI_DOCKERD_SOCKET}"))
    }

    /// Plans the flag files' edits into the state (nothing is written), refusing when they
    /// would leave the new kubelet with a flag it refuses. Returns the running kubelet's
    /// arguments as the edited files will give them, for the new binary's check (`None`: no
    /// switch, or [`KubeletFlags::Keep`]).
    pub(super) fn plan_kubelet_flags(
        &mut self,
        plan: &Plan,
        running: Option<&[String]>,
    ) -> Result<Option<Vec<String>>, Preflight> {
        if plan.cri_dockerd.is_none() || self.opts.kubelet_flags == KubeletFlags::Keep {
            return Ok(None);
        }
        let refuse = |s: String| Err(Preflight::Refused(s));
        let (files, given) = match &self.opts.kubelet_flags {
            KubeletFlags::Files(f) => (f.clone(), true),
            _ => {
                let host = cri_dockerd::host(&self.opts.cri_dockerd).map_err(Preflight::from)?;
                let mut found = Vec::new();
                for f in KUBELET_FLAG_FILES {
                    if let Ok(p) = cri_dockerd::resolve(&host, f) {
                        if p.is_file() {
                            found.push(p);
                        }
                    }
                }
                (found, false)
            }
        };
        let endpoint = self.kubelet_endpoint();
        let to = self.opts.to;
        let mut records = Vec::new();
        let mut dropped: Vec<String> = Vec::new();
        for (i, path) in files.iter().enumerate() {
            let (bytes, _, text) = match read_text(path) {
                Ok(t) => t,
                Err(e) => return refuse(format!("kubelet flag file: {e}")),
            };
            // a flag on a line the rewrite cannot parse would stay: refused, naming the line
            // (the plan's hazard covers the node's own files; these may be others)
            if let Some(h) = cri_dockerd::unparsed_flags_hazard(path, &text) {
                return refuse(format!("[{}] {}", h.code, h.message));
            }
            let mut edit = edit_flags_file(&text, to, &endpoint, false);
            // the new flags go somewhere: the first given file, or kubeadm's
            let first_choice = if given {
                i == 0
            } else {
                path.ends_with("kubeadm-flags.env")
            };
            let append = edit.is_none()
                && first_choice
                && records.is_empty()
                && !files.iter().skip(i + 1).any(|p| {
                    read_text(p)
                        .ok()
                        .and_then(|(_, _, t)| edit_flags_file(&t, to, &endpoint, false))
                        .is_some()
                });
            if append {
                edit = edit_flags_file(&text, to, &endpoint, true);
            }
            let Some(edit) = edit else { continue };
            dropped.extend(edit.dropped.iter().cloned());
            let n = records.len();
            records.push(FlagsFileRecord {
                path: path.display().to_string(),
                backup: self
                    .backup_dir()
                    .join("kubelet")
                    .join(format!("flags-{n}"))
                    .display()
                    .to_string(),
                sha256_original: cri_dockerd::sha256(&bytes),
                sha256_new: cri_dockerd::sha256(&edit.new),
                dropped: edit.dropped,
                added: edit.added,
                endpoint: endpoint.clone(),
                append,
                rewritten: false,
            });
        }
        let args: Option<Vec<String>> = running.map(|a| a.to_vec());
        let in_use = args.as_deref().map(removed_in).unwrap_or_default();
        let uncovered: Vec<&String> = in_use.iter().filter(|f| !dropped.contains(f)).collect();
        let names = |fs: &[PathBuf]| {
            if fs.is_empty() {
                "none found".to_string()
            } else {
                fs.iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        if !uncovered.is_empty() {
            return refuse(format!(
                "the running kubelet has {} which kubelet {to} refuses, set outside the kubelet flag files this run rewrites ({}): give the file that sets them with --kubelet-flags-file, or change them yourself and give --keep-kubelet-flags",
                uncovered.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                names(&files)
            ));
        }
        let gets_endpoint = records.iter().any(|r| !r.added.is_empty());
        let has_endpoint = args.as_deref().is_some_and(|a| {
            a.iter()
                .any(|x| x == &format!("--container-runtime-endpoint={endpoint}"))
        });
        if !gets_endpoint && !has_endpoint {
            return refuse(format!(
                "no kubelet flag file to give kubelet {to} --container-runtime-endpoint={endpoint} ({}): give the kubelet unit's EnvironmentFile with --kubelet-flags-file, or give --keep-kubelet-flags when its flags are managed elsewhere",
                names(&files)
            ));
        }
        for r in &records {
            self.state.notes.push(format!(
                "kubelet flags in {}: {}{}",
                r.path,
                if r.dropped.is_empty() {
                    String::new()
                } else {
                    format!("drops {}; ", r.dropped.join(" "))
                },
                if r.added.is_empty() {
                    "adds nothing".to_string()
                } else {
                    format!("sets {}", r.added.join(" "))
                }
            ));
        }
        self.state.kubelet_flags = records;
        self.save();
        Ok(args.map(|a| translate_args(&a, to, &endpoint)))
    }

    /// Whether the window has flag files still to rewrite.
    pub(super) fn flags_pending(&self) -> bool {
        self.state.kubelet_flags.iter().any(|r| !r.rewritten)
    }

    /// Writes every planned flag file: its original into the backup first (made durable),
    /// then the edit, atomically with the original's mode and owner. A file changed since the
    /// preflight fails the step (going back puts back what was written).
    pub(super) fn rewrite_kubelet_flags(&mut self) -> Result<(), StepError> {
        for i in 0..self.state.kubelet_flags.len() {
            let r = self.state.kubelet_flags[i].clone();
            if r.rewritten {
                continue;
            }
            let path = PathBuf::from(&r.path);
            let (bytes, meta, text) = read_text(&path).map_err(StepError::failure)?;
            let sha = cri_dockerd::sha256(&bytes);
            if sha == r.sha256_new {
                self.state.kubelet_flags[i].rewritten = true;
                continue;
            }
            if sha != r.sha256_original {
                return Err(StepError::refused(format!(
                    "{} changed since the preflight (sha256 {sha}, planned from {}): not rewritten",
                    r.path, r.sha256_original
                )));
            }
            let edit = edit_flags_file(&text, self.state.to, &r.endpoint, r.append)
                .filter(|e| cri_dockerd::sha256(&e.new) == r.sha256_new)
                .ok_or_else(|| {
                    StepError::failure(format!(
                        "{}: the edit does not reproduce the planned bytes",
                        r.path
                    ))
                })?;
            let backup = PathBuf::from(&r.backup);
            storepatch::atomic::create_dir_all_private(backup.parent().expect("in the backup"))?;
            replace_file(&backup, &bytes, FileMeta::private())?;
            self.state.done.flags_rewrite_started = true;
            self.save();
            replace_file(&path, &edit.new, meta)?;
            self.state.kubelet_flags[i].rewritten = true;
            self.save();
        }
        Ok(())
    }

    /// Puts every flag file this run (or the killed run it finishes) wrote back to its
    /// original bytes. A file that holds neither the original nor what was written was changed
    /// by someone else since: left as it is, and said.
    pub(super) fn undo_kubelet_flags(&mut self) -> Result<(), StepError> {
        let mut left = Vec::new();
        for i in 0..self.state.kubelet_flags.len() {
            let r = self.state.kubelet_flags[i].clone();
            let path = PathBuf::from(&r.path);
            let (bytes, meta) = match read_regular_nofollow(&path) {
                Ok(b) => b,
                Err(e) => {
                    left.push(e.to_string());
                    continue;
                }
            };
            let sha = cri_dockerd::sha256(&bytes);
            if sha == r.sha256_original {
                self.state.kubelet_flags[i].rewritten = false;
                continue;
            }
            if sha != r.sha256_new {
                left.push(format!(
                    "{} holds neither its original nor what this run wrote: left as it is (the original is {})",
                    r.path, r.backup
                ));
                continue;
            }
            let original = match read_regular_nofollow(Path::new(&r.backup)) {
                Ok((b, _)) if cri_dockerd::sha256(&b) == r.sha256_original => b,
                Ok(_) => {
                    left.push(format!("{}: the backup copy is damaged", r.backup));
                    continue;
                }
                Err(e) => {
                    left.push(e.to_string());
                    continue;
                }
            };
            replace_file(&path, &original, meta)?;
            self.state.kubelet_flags[i].rewritten = false;
            self.save();
        }
        if left.is_empty() {
            self.state.done.flags_rewrite_started = false;
            Ok(())
        } else {
            Err(StepError::failure(left.join("; ")))
        }
    }
}
