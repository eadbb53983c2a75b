//! The kubelet's own flags across the switch: kubelet 1.24 refuses to start with any of the
//! dockershim-only flags ([`super::REMOVED_KUBELET_FLAGS`]) and must be told cri-dockerd's
//! socket. `upgrade` rewrites the node's kubelet flag files (kubeadm's
//! `/var/lib/kubelet/kubeadm-flags.env`, the packages' `/etc/default/kubelet` and
//! `/etc/sysconfig/kubelet`: `NAME="--flag=value ..."` lines a systemd `EnvironmentFile=`
//! reads) and checks the new kubelet binary against the command line the edited files give.
//!
//! The edit is a pure function of the file's bytes, so a run that finishes a killed one
//! recomputes exactly what the killed run wrote, and the state file proves it by sha256.

use super::REMOVED_KUBELET_FLAGS;
use hashcompat::KubeletVersion;

/// `--container-runtime`: `docker` before the switch; `remote` is required before 1.27, where
/// the flag was removed.
const CONTAINER_RUNTIME: &str = "--container-runtime";
/// Where the kubelet finds its CRI runtime.
const RUNTIME_ENDPOINT: &str = "--container-runtime-endpoint";

/// Whether the kubelet flag `name` takes its value as the next argument when it is not written
/// `--name=value` (every flag the switch drops or sets does; booleans never appear here).
fn takes_value(name: &str) -> bool {
    name == CONTAINER_RUNTIME
        || name == RUNTIME_ENDPOINT
        || REMOVED_KUBELET_FLAGS.iter().any(|(f, _)| *f == name)
}

fn flag_name(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(n, _)| n)
}

/// The flags the switch drops: the removed dockershim flags, `--container-runtime` and any
/// earlier `--container-runtime-endpoint` (dockershim's own socket).
fn dropped(name: &str) -> bool {
    takes_value(name)
}

/// What the target kubelet is given instead.
pub fn switch_flags(to: KubeletVersion, endpoint: &str) -> Vec<String> {
    let mut out = Vec::new();
    if to.minor() < 27 {
        out.push(format!("{CONTAINER_RUNTIME}=remote"));
    }
    out.push(format!("{RUNTIME_ENDPOINT}={endpoint}"));
    out
}

/// Removes the dropped flags (and the separate value of each written `--flag value`) from
/// `args`; returns the kept arguments and the dropped flags' names, in order.
fn strip(args: &[String]) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut gone = Vec::new();
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        let name = flag_name(a);
        if a.starts_with("--") && dropped(name) {
            gone.push(name.to_string());
            if !a.contains('=') && it.peek().is_some_and(|v| !v.starts_with("--")) {
                it.next();
            }
            continue;
        }
        kept.push(a.clone());
    }
    (kept, gone)
}

/// The running kubelet's arguments (without argv\[0]) as they will be after the switch: the
/// dockershim flags gone, [`switch_flags`] appended.
pub fn translate_args(args: &[String], to: KubeletVersion, endpoint: &str) -> Vec<String> {
    let (mut kept, _) = strip(args);
    kept.extend(switch_flags(to, endpoint));
    kept
}

/// The removed dockershim flags among `args`.
pub fn removed_in(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| flag_name(a))
        .filter(|n| REMOVED_KUBELET_FLAGS.iter().any(|(f, _)| f == n))
        .map(str::to_string)
        .collect()
}

/// One flag file's edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagsEdit {
    /// The file's bytes after the edit.
    pub new: Vec<u8>,
    /// The flags it no longer sets (names, in order).
    pub dropped: Vec<String>,
    /// The flags it now sets.
    pub added: Vec<String>,
}

/// A `NAME=value` line's value: its quote and its words. `None` for lines that are not plain
/// assignments of words (comments, `export`, shell expansions we would not reproduce).
fn assignment(line: &str) -> Option<(&str, char, Vec<String>)> {
    let (name, value) = line.split_once('=')?;
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let (quote, inner) = match value.chars().next() {
        Some(q @ ('"' | '\'')) if value.len() >= 2 && value.ends_with(q) => {
            (q, &value[1..value.len() - 1])
        }
        _ => (' ', value),
    };
    if inner.contains(['$', '`', '\\', '"', '\'']) {
        return None;
    }
    Some((
        name,
        quote,
        inner.split_whitespace().map(str::to_string).collect(),
    ))
}

/// The lines of a kubelet flag file that set a flag the switch drops
/// ([`super::REMOVED_KUBELET_FLAGS`], `--container-runtime`, `--container-runtime-endpoint`)
/// but are no plain assignment [`edit_flags_file`] can rewrite: a `\` continuation, `export`,
/// a shell expansion, quotes inside. (1-based line number, the line.) Such a flag would stay
/// and stop the new kubelet, so the plan blocks on it, naming the line.
pub fn unparsed_flag_lines(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let body = line.trim_end_matches('\r');
            let trimmed = body.trim_start();
            !trimmed.is_empty() && !trimmed.starts_with('#') && assignment(body).is_none()
        })
        .filter(|(_, line)| {
            line.split(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '\\' | '`'))
                .any(|w| w.starts_with("--") && dropped(flag_name(w)))
        })
        .map(|(i, line)| (i + 1, line.to_string()))
        .collect()
}

/// The edit of one kubelet flag file: every removed dockershim flag and the old runtime flags
/// dropped from its assignments, [`switch_flags`] added to the first assignment that held a
/// dropped flag (else to the first one holding any flag, else a `KUBELET_EXTRA_ARGS` line
/// appended when `add_if_absent`). `None` when the file needs no change.
pub fn edit_flags_file(
    text: &str,
    to: KubeletVersion,
    endpoint: &str,
    add_if_absent: bool,
) -> Option<FlagsEdit> {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let mut dropped = Vec::new();
    let mut target: Option<(usize, usize)> = None; // (line, priority: 0 held a dropped flag)
    let mut rewritten: Vec<Option<(String, char, Vec<String>)>> = vec![None; lines.len()];
    // the words of every assignment before the edit
    let mut before: Vec<Vec<String>> = Vec::new();
    for (i, raw) in lines.iter().enumerate() {
        let body = raw.trim_end_matches(['\n', '\r']);
        let Some((name, quote, words)) = assignment(body) else {
            continue;
        };
        if !words.iter().any(|w| w.starts_with("--")) {
            continue;
        }
        let (kept, gone) = strip(&words);
        before.push(words.clone());
        let priority = if gone.is_empty() { 1 } else { 0 };
        if target.is_none_or(|(_, p)| priority < p) {
            target = Some((i, priority));
        }
        dropped.extend(gone);
        rewritten[i] = Some((name.to_string(), quote, kept));
    }
    let added = switch_flags(to, endpoint);
    // a file that already says exactly what the switch needs is left alone
    let already = dropped
        .iter()
        .all(|d| added.iter().any(|a| flag_name(a) == d))
        && before.iter().any(|w| added.iter().all(|a| w.contains(a)));
    if already {
        return None;
    }
    match target {
        Some((t, _)) => {
            for (i, r) in rewritten.into_iter().enumerate() {
                let Some((name, quote, mut words)) = r else {
                    continue;
                };
                if i == t {
                    words.extend(added.iter().cloned());
                }
                let end = &lines[i][lines[i].trim_end_matches(['\n', '\r']).len()..];
                let value = words.join(" ");
                let q = if quote == ' ' {
                    if value.contains(' ') {
                        "\"".to_string()
                    } else {
                        String::new()
                    }
                } else {
                    quote.to_string()
                };
                lines[i] = format!("{name}={q}{value}{q}{end}");
            }
        }
        None if add_if_absent => {
            if lines.last().is_some_and(|l| !l.ends_with('\n')) {
                lines.last_mut().expect("checked").push('\n');
            }
            lines.push(format!("KUBELET_EXTRA_ARGS=\"{}\"\n", added.join(" ")));
        }
        None => return None,
    }
    Some(FlagsEdit {
        new: lines.concat().into_bytes(),
        dropped,
        added,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeletVersion {
        s.parse().unwrap()
    }
    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }
    const EP: &str = "unix:///var/run/cri-dockerd.sock";

    #[test]
    fn a_kubeadm_dockershim_flags_file_loses_its_dockershim_flags_and_names_cri_dockerd() {
        // what kubeadm 1.23 writes for a Docker node
        let text = "KUBELET_KUBEADM_ARGS=\"--network-plugin=cni --pod-infra-container-image=k8s.gcr.io/pause:3.6\"\n";
        let e = edit_flags_file(text, v("1.24"), EP, false).expect("needs an edit");
        assert_eq!(
            String::from_utf8(e.new).unwrap(),
            "KUBELET_KUBEADM_ARGS=\"--pod-infra-container-image=k8s.gcr.io/pause:3.6 --container-runtime=remote --container-runtime-endpoint=unix:///var/run/cri-dockerd.sock\"\n"
        );
        assert_eq!(e.dropped, ["--network-plugin"]);
        let e = edit_flags_file(text, v("1.31"), EP, false).unwrap();
        assert!(
            !String::from_utf8(e.new)
                .unwrap()
                .contains("--container-runtime="),
            "kubelet 1.27+ has no --container-runtime flag"
        );
    }

    #[test]
    fn separate_values_comments_and_other_lines_are_kept_or_dropped_exactly() {
        let text = "# kubelet flags\nKUBELET_EXTRA_ARGS='--node-ip=10.0.0.5 --cni-bin-dir /opt/cni/bin --container-runtime docker'\nOTHER=1\nKUBELET_KUBEADM_ARGS=--v=2";
        let e = edit_flags_file(text, v("1.26"), EP, false).unwrap();
        assert_eq!(
            String::from_utf8(e.new).unwrap(),
            "# kubelet flags\nKUBELET_EXTRA_ARGS='--node-ip=10.0.0.5 --container-runtime=remote --container-runtime-endpoint=unix:///var/run/cri-dockerd.sock'\nOTHER=1\nKUBELET_KUBEADM_ARGS=--v=2"
        );
        assert_eq!(e.dropped, ["--cni-bin-dir", "--container-runtime"]);
    }

    #[test]
    fn an_edited_file_needs_no_second_edit() {
        let text = "KUBELET_KUBEADM_ARGS=\"--network-plugin=cni\"\n";
        let once = edit_flags_file(text, v("1.24"), EP, true).unwrap();
        let again = edit_flags_file(std::str::from_utf8(&once.new).unwrap(), v("1.24"), EP, true);
        assert_eq!(again, None, "the edit is idempotent");
    }

    #[test]
    fn a_file_without_flags_gets_a_line_only_when_asked() {
        assert_eq!(edit_flags_file("# empty\n", v("1.24"), EP, false), None);
        let e = edit_flags_file("# empty", v("1.30"), EP, true).unwrap();
        assert_eq!(
            String::from_utf8(e.new).unwrap(),
            "# empty\nKUBELET_EXTRA_ARGS=\"--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock\"\n"
        );
    }

    #[test]
    fn shell_expansions_are_not_rewritten() {
        let text = "KUBELET_EXTRA_ARGS=\"$EXTRA --network-plugin=cni\"\n";
        assert_eq!(
            edit_flags_file(text, v("1.24"), EP, false),
            None,
            "a line we could not reproduce is left to the operator (the preflight then refuses)"
        );
    }

    #[test]
    fn lines_the_rewriter_cannot_parse_are_named_when_they_set_a_dropped_flag() {
        let text = "# --network-plugin=cni in a comment\n\
            KUBELET_KUBEADM_ARGS=\"--network-plugin=cni --pod-infra-container-image=pause\"\n\
            export KUBELET_EXTRA_ARGS=\"--image-pull-progress-deadline=2m\"\n\
            KUBELET_ARGS=\"--v=2 \\\n\
            \x20 --network-plugin=cni\"\n\
            OTHER=\"$BASE --cni-bin-dir=/opt/cni/bin\"\n\
            HARMLESS=\"$BASE --v=2\"\n\
            export PATH=/usr/bin\n";
        let got = unparsed_flag_lines(text);
        let numbers: Vec<usize> = got.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            numbers,
            [3, 5, 6],
            "export, the continuation holding the flag, and the expansion are named; the plain assignment, the comment and the lines without a dropped flag are not: {got:?}"
        );
        assert!(got[0].1.starts_with("export KUBELET_EXTRA_ARGS"), "{got:?}");
        // what the rewriter handles itself is never named
        assert!(unparsed_flag_lines("KUBELET_KUBEADM_ARGS=\"--network-plugin=cni\"\n").is_empty());
    }

    #[test]
    fn the_running_command_line_is_translated() {
        let args = words("--config=/var/lib/kubelet/config.yaml --network-plugin cni --cni-conf-dir=/etc/cni/net.d --container-runtime-endpoint=unix:///var/run/dockershim.sock --v=2");
        assert_eq!(removed_in(&args), ["--network-plugin", "--cni-conf-dir"]);
        assert_eq!(
            translate_args(&args, v("1.24"), EP),
            words("--config=/var/lib/kubelet/config.yaml --v=2 --container-runtime=remote --container-runtime-endpoint=unix:///var/run/cri-dockerd.sock")
        );
    }
}
