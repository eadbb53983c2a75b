//! What root may believe of a file it did not just write itself: a backup, an in-flight
//! marker, an `upgrade` state file. Each of them names paths that root then writes, so one that
//! another user could have written (or swapped, through a directory above it) would let that
//! user choose what root overwrites. One rule for all of them, written once:
//! - the file or directory is owned by the invoking user or root and is not writable by group
//!   or others;
//! - no directory above it is owned by another user, and none is writable by others without
//!   the sticky bit (which keeps them from renaming what they do not own, as in /tmp), along
//!   the path as given and along the resolved path, up to `/`.
//!
//! The checks return the reason as a sentence; each caller wraps it in its own error class.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The effective user of this process.
fn euid() -> u32 {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `uid`/`mode` (of `path`) may be believed: owned by this user or root, not writable
/// by group or others.
pub fn owner_and_mode(path: &Path, uid: u32, mode: u32) -> Result<(), String> {
    let me = euid();
    if uid != me && uid != 0 {
        return Err(format!(
            "{} is owned by uid {uid}, not by this user (uid {me}) or root: anyone could have forged it",
            path.display()
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o}): anyone could have forged it",
            path.display(),
            mode & 0o7777
        ));
    }
    Ok(())
}

/// Whether every directory above `path` keeps other users from swapping it (see the module
/// doc). `path` itself must exist (its resolved path is checked too).
pub fn parents(path: &Path) -> Result<(), String> {
    let me = euid();
    let given = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for parent in given.ancestors().skip(1).chain(real.ancestors().skip(1)) {
        let m = std::fs::metadata(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        let mode = m.mode();
        if m.uid() != me && m.uid() != 0 {
            return Err(format!(
                "{} (above {}) is owned by uid {}, not by this user (uid {me}) or root: that user could have swapped it",
                parent.display(),
                path.display(),
                m.uid()
            ));
        }
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(format!(
                "{} (above {}) is writable by others without the sticky bit (mode {:o}): anyone could have swapped it",
                parent.display(),
                path.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

/// Whether `inner` lies inside `dir` by its components alone: both absolute, `inner` free of
/// `..`, and every component of `dir` a prefix of `inner`'s. (Symbolic links are the
/// business of [`parents`] and of opening without following them.)
pub fn lexically_inside(inner: &Path, dir: &Path) -> bool {
    use std::path::Component;
    inner.is_absolute()
        && dir.is_absolute()
        && !inner
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        && inner != dir
        && inner.starts_with(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn owner_and_mode_refuses_group_or_other_write_and_foreign_owners() {
        let p = Path::new("/x");
        assert!(owner_and_mode(p, euid(), 0o100600).is_ok());
        assert!(owner_and_mode(p, 0, 0o100644).is_ok());
        let e = owner_and_mode(p, euid(), 0o100620).unwrap_err();
        assert!(e.contains("writable by group or others"), "{e}");
        assert!(owner_and_mode(p, euid(), 0o100602).is_err());
        if euid() == 0 {
            let e = owner_and_mode(p, 65534, 0o100600).unwrap_err();
            assert!(e.contains("owned by uid 65534"), "{e}");
        }
    }

    #[test]
    fn parents_refuses_a_world_writable_directory_without_the_sticky_bit() {
        let t = tempfile::tempdir().unwrap();
        let open = t.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let f = open.join("f");
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = parents(&f).unwrap_err();
        assert!(e.contains("without the sticky bit"), "{e}");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        // the tempdir's own ancestors (/tmp is 1777) pass
        parents(&f).unwrap();
    }

    #[test]
    fn lexically_inside_needs_a_proper_prefix_without_dotdot() {
        let d = Path::new("/var/lib/x");
        assert!(lexically_inside(Path::new("/var/lib/x/b/c"), d));
        assert!(!lexically_inside(Path::new("/var/lib/x"), d));
        assert!(!lexically_inside(Path::new("/var/lib/xy/c"), d));
        assert!(!lexically_inside(
            Path::new("/var/lib/x/../../etc/passwd"),
            d
        ));
        assert!(!lexically_inside(Path::new("var/lib/x/b"), d));
    }
}
