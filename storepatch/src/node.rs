//! The node the stores are on, as seen from here: its `/` ([`HostRoot`], for `--host-root`: the
//! node's `/` mounted somewhere else, as a privileged Job mounts it at `/host`) and its procfs
//! ([`procfs`]). The back-ends and the layouts both use it; it uses neither.
//!
//! Every default path of a node (config files, store roots, sockets, pid files) names a place in
//! the node's own file system. Joining it to the host root is not enough: the node's symbolic
//! links are written for the node (`/var/run -> /run`, a data-root moved with
//! `/var/lib/docker -> /data/docker`, or a hostile `/etc/docker/daemon.json -> /proc/1/environ`
//! planted to make us read our own container's files). [`HostRoot::resolve`] therefore resolves
//! every component itself, the way the kernel would inside `chroot(host root)`: an absolute link
//! target starts again at the host root, and `..` stops at the host root. No path it returns
//! lies outside the host root, whatever the links say.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Links followed in one resolution before giving up, as the kernel's `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// Where the node's `/` is. [`HostRoot::none`] (or `/`) is the node itself: paths stay as given
/// and the kernel resolves them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostRoot {
    /// The host root with its own symlinks resolved; `None` for the node's own `/`.
    dir: Option<PathBuf>,
}

/// Why a `--host-root` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRootError {
    /// It does not exist.
    #[error("--host-root {0}: no such directory (it is where the node's / is mounted, e.g. /host in a Job with a hostPath volume of /)")]
    Missing(PathBuf),
    /// It exists but is not a directory.
    #[error("--host-root {0} is not a directory: give the directory where the node's / is mounted (e.g. /host), or leave the option out to work on this machine's own /")]
    NotADirectory(PathBuf),
    /// It cannot be looked at.
    #[error("--host-root {path}: {reason}")]
    Unreadable {
        /// The path given.
        path: PathBuf,
        /// What the system said.
        reason: String,
    },
}

impl HostRoot {
    /// The node's own `/`.
    pub fn none() -> Self {
        HostRoot { dir: None }
    }

    /// The node's `/` mounted at `dir`. `/` itself is the same as [`HostRoot::none`]. A relative
    /// `dir` is taken from the current directory.
    pub fn new(dir: &Path) -> Result<Self, HostRootError> {
        let real = std::fs::canonicalize(dir).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => HostRootError::Missing(dir.to_path_buf()),
            io::ErrorKind::NotADirectory => HostRootError::NotADirectory(dir.to_path_buf()),
            _ => HostRootError::Unreadable {
                path: dir.to_path_buf(),
                reason: e.to_string(),
            },
        })?;
        if !real.is_dir() {
            return Err(HostRootError::NotADirectory(dir.to_path_buf()));
        }
        if real == Path::new("/") {
            return Ok(HostRoot::none());
        }
        Ok(HostRoot { dir: Some(real) })
    }

    /// The host root's directory, `None` for the node's own `/`.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Where the node's absolute `path` is seen from here: the path itself without a host root,
    /// else the path resolved inside the host root (module docs). Components that do not exist
    /// are kept as named, so a missing file resolves to where it would be.
    pub fn resolve(&self, path: &Path) -> io::Result<PathBuf> {
        match &self.dir {
            None => Ok(path.to_path_buf()),
            Some(dir) => resolve_in_root(dir, path),
        }
    }

    /// The node path a resolved path stands for (`/host/var/lib/x` → `/var/lib/x`), for
    /// messages an operator compares with the node's own configuration.
    pub fn node_path(&self, resolved: &Path) -> PathBuf {
        match &self.dir {
            Some(dir) => match resolved.strip_prefix(dir) {
                Ok(rel) => Path::new("/").join(rel),
                Err(_) => resolved.to_path_buf(),
            },
            None => resolved.to_path_buf(),
        }
    }
}

/// Resolves `path` inside `root` as `chroot(root)` would, following every symbolic link
/// itself: absolute targets restart at `root`, `..` never climbs above it. `root` must be an
/// absolute path without symbolic links (a canonical path).
pub fn resolve_in_root(root: &Path, path: &Path) -> io::Result<PathBuf> {
    // Components still to walk, in reverse so the next one is at the end.
    let mut pending: Vec<OsString> = Vec::new();
    push_components(&mut pending, path);
    let mut done: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(name) = pending.pop() {
        if name.is_empty() {
            // An absolute link target: start again at the root.
            done.clear();
            continue;
        }
        if name == ".." {
            done.pop();
            continue;
        }
        let mut here = root.to_path_buf();
        here.extend(&done);
        here.push(&name);
        match std::fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io::Error::other(format!(
                            "{}: more than {MAX_LINKS} symbolic links (a loop?) while resolving it inside {}",
                            path.display(),
                            root.display()
                    )));
                }
                let target = std::fs::read_link(&here)?;
                push_components(&mut pending, &target);
            }
            Ok(_) => done.push(name),
            // What does not exist (yet) is named as given; what lies below a file is not
            // there either, and opening it later says so.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                done.push(name)
            }
            Err(e) => return Err(e),
        }
    }
    let mut out = root.to_path_buf();
    out.extend(&done);
    Ok(out)
}

/// Pushes `path`'s components onto `pending` so that they pop in order; an absolute path
/// pushes a restart marker (an empty name) first. `.` components are dropped.
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let mut names: Vec<OsString> = Vec::new();
    for c in path.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => {
                names.clear();
                names.push(OsString::new());
            }
            Component::CurDir => {}
            Component::ParentDir => names.push("..".into()),
            Component::Normal(n) => names.push(n.to_os_string()),
        }
    }
    pending.extend(names.into_iter().rev());
}

/// The procfs to look pids up in: `proc` when it is one (it has pid 1: a node's `/proc` under
/// a host root, mounted recursively with the node's `/`), else this machine's `/proc`, which
/// is the node's own when the tool runs on the node or in a Job with `hostPID`.
pub fn procfs(proc: &Path) -> &Path {
    if proc != Path::new("/proc") && proc.join("1").is_dir() {
        proc
    } else {
        Path::new("/proc")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn host() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap().join("host");
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("var/lib")).unwrap();
        std::fs::create_dir_all(root.join("etc/docker")).unwrap();
        (d, root)
    }

    #[test]
    fn plain_paths_and_missing_components_stay_under_the_root() {
        let (_d, root) = host();
        let r = |p: &str| resolve_in_root(&root, Path::new(p)).unwrap();
        assert_eq!(r("/var/lib/docker"), root.join("var/lib/docker"));
        assert_eq!(r("/var/./lib//x/../docker"), root.join("var/lib/docker"));
        assert_eq!(r("/"), root);
        assert_eq!(r("relative/x"), root.join("relative/x"));
    }

    #[test]
    fn node_links_are_followed_inside_the_root() {
        let (_d, root) = host();
        symlink("/run", root.join("var/run")).unwrap();
        symlink("../../run/k3s", root.join("var/lib/k3s-run")).unwrap();
        std::fs::create_dir_all(root.join("run/k3s")).unwrap();
        let r = |p: &str| resolve_in_root(&root, Path::new(p)).unwrap();
        assert_eq!(r("/var/run/docker.sock"), root.join("run/docker.sock"));
        assert_eq!(r("/var/lib/k3s-run/x"), root.join("run/k3s/x"));
        // A chain of links, one relative to its own directory.
        symlink("docker-data", root.join("var/lib/docker")).unwrap();
        symlink("/data/docker", root.join("var/lib/docker-data")).unwrap();
        assert_eq!(
            r("/var/lib/docker/containers"),
            root.join("data/docker/containers")
        );
    }

    #[test]
    fn hostile_links_cannot_leave_the_root() {
        let (d, root) = host();
        let outside = std::fs::canonicalize(d.path()).unwrap().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"x").unwrap();
        // An absolute target naming a real place outside: re-rooted, not followed out.
        symlink(outside.join("secret"), root.join("etc/docker/daemon.json")).unwrap();
        // `..` far past the root: clamped at the root.
        symlink("../../../../../../../..", root.join("etc/up")).unwrap();
        symlink("/proc/1/environ", root.join("etc/environ")).unwrap();
        let r = |p: &str| resolve_in_root(&root, Path::new(p)).unwrap();
        let dj = r("/etc/docker/daemon.json");
        assert!(dj.starts_with(&root), "{}", dj.display());
        assert_eq!(
            dj,
            root.join(outside.strip_prefix("/").unwrap()).join("secret")
        );
        assert_eq!(r("/etc/up"), root);
        assert_eq!(r("/etc/up/outside/secret"), root.join("outside/secret"));
        assert_eq!(r("/../../etc"), root.join("etc"));
        assert_eq!(r("/etc/environ"), root.join("proc/1/environ"));
        // A link to its own parent's parent through a relative hop.
        symlink("../..", root.join("var/lib/loopy")).unwrap();
        assert_eq!(r("/var/lib/loopy/../../etc"), root.join("etc"));
    }

    #[test]
    fn link_loops_are_an_error_not_a_hang() {
        let (_d, root) = host();
        symlink("b", root.join("etc/a")).unwrap();
        symlink("a", root.join("etc/b")).unwrap();
        let e = resolve_in_root(&root, Path::new("/etc/a/x")).unwrap_err();
        assert!(e.to_string().contains("symbolic links"), "{e}");
    }

    #[test]
    fn host_root_checks_what_it_is_given() {
        let (d, root) = host();
        assert_eq!(HostRoot::new(Path::new("/")).unwrap(), HostRoot::none());
        assert_eq!(
            HostRoot::none().resolve(Path::new("/var/run/x")).unwrap(),
            PathBuf::from("/var/run/x"),
            "without a host root the kernel resolves"
        );
        let file = d.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(matches!(
            HostRoot::new(&file),
            Err(HostRootError::NotADirectory(_))
        ));
        assert!(HostRoot::new(&file)
            .unwrap_err()
            .to_string()
            .contains("is not a directory"));
        assert!(matches!(
            HostRoot::new(&d.path().join("gone")),
            Err(HostRootError::Missing(_))
        ));
        let h = HostRoot::new(&root).unwrap();
        let sock = h.resolve(Path::new("/run/x.sock")).unwrap();
        assert_eq!(sock, root.join("run/x.sock"));
        assert_eq!(h.node_path(&sock), PathBuf::from("/run/x.sock"));
        // The host root given through a link is the same host root.
        symlink(&root, d.path().join("host-link")).unwrap();
        assert_eq!(HostRoot::new(&d.path().join("host-link")).unwrap(), h);
    }

    /// The kernel's own in-root resolution (`openat2` with `RESOLVE_IN_ROOT`, Linux 5.6+) as
    /// the oracle: on random trees of relative, absolute, climbing and chained links, every
    /// path the kernel resolves resolves to the same place here, and no path here leaves the
    /// root.
    #[test]
    fn resolution_matches_the_kernels_resolve_in_root() {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as usize) % n
        };
        let mut compared = 0;
        for _tree in 0..30 {
            let d = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(d.path()).unwrap();
            for dir in ["a/b/c", "d", "e/f"] {
                std::fs::create_dir_all(root.join(dir)).unwrap();
            }
            std::fs::write(root.join("a/x"), b"").unwrap();
            std::fs::write(root.join("d/y"), b"").unwrap();
            let targets = [
                "/a/b",
                "/d",
                "/",
                "/nonexistent",
                "/e/f/..",
                "..",
                "../..",
                "b",
                "../d",
                "../../../../..",
                "c/../../x",
                "/a/l1",
                "l2",
                "../l3/..",
                "/d/y",
            ];
            let dirs = ["", "a", "a/b", "d", "e/f"];
            for i in 0..12 {
                let at = root.join(dirs[next(dirs.len())]).join(format!("l{i}"));
                symlink(targets[next(targets.len())], &at).unwrap();
            }
            let names = [
                "a", "b", "c", "d", "e", "f", "x", "y", "..", ".", "l0", "l1", "l2", "l3", "l4",
                "l5", "l6", "l7", "l8", "l9", "l10", "l11",
            ];
            let rootfd = std::fs::File::open(&root).unwrap();
            for _query in 0..300 {
                let len = 1 + next(4);
                let rel: Vec<&str> = (0..len).map(|_| names[next(names.len())]).collect();
                let rel = rel.join("/");
                let ours = resolve_in_root(&root, &Path::new("/").join(&rel));
                if let Ok(p) = &ours {
                    assert!(
                        p.starts_with(&root),
                        "{rel} -> {} left the root",
                        p.display()
                    );
                }
                let c = CString::new(Path::new(&rel).as_os_str().as_bytes()).unwrap();
                let mut how: libc::open_how = unsafe { std::mem::zeroed() };
                how.flags = (libc::O_PATH | libc::O_CLOEXEC) as u64;
                how.resolve = libc::RESOLVE_IN_ROOT;
                // SAFETY: a valid dirfd, NUL-terminated path and a zeroed open_how of its size.
                let fd = unsafe {
                    libc::syscall(
                        libc::SYS_openat2,
                        std::os::fd::AsRawFd::as_raw_fd(&rootfd),
                        c.as_ptr(),
                        &how as *const libc::open_how,
                        std::mem::size_of::<libc::open_how>(),
                    )
                };
                if fd < 0 {
                    // Missing components, loops, a file used as a directory: the kernel
                    // names no place to compare with.
                    continue;
                }
                let fd = fd as i32;
                let kernel = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
                // SAFETY: fd is ours and closed once.
                unsafe { libc::close(fd) };
                let ours = ours.unwrap_or_else(|e| {
                    panic!("{rel}: kernel found {}, we failed: {e}", kernel.display())
                });
                assert_eq!(ours, kernel, "/{rel}");
                compared += 1;
            }
        }
        assert!(
            compared > 500,
            "only {compared} paths were compared with the kernel"
        );
    }
}
