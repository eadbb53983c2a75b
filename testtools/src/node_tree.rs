//! An empty node `/` in a temp dir, filled with bundled real stores and configuration files
//! at the paths a distribution puts them: what the layout-discovery and `--host-root` tests
//! (storepatch/tests/layout.rs, cli/tests/layouts.rs) build their nodes from.

use std::path::PathBuf;
use std::process::Command;

/// A node's `/` (`root`) in a temp dir that is removed on drop.
pub struct NodeTree {
    _tmp: tempfile::TempDir,
    /// The node's `/` (canonical, so resolved paths compare equal).
    pub root: PathBuf,
}

/// `fixtures/nodes/<rel>` of this repository.
pub fn fixture(rel: &str) -> PathBuf {
    crate::fixtures_dir().join("nodes").join(rel)
}

impl NodeTree {
    /// An empty node.
    pub fn new() -> NodeTree {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap().join("host");
        std::fs::create_dir(&root).unwrap();
        NodeTree { _tmp: tmp, root }
    }

    /// `<root>/<node_path>`.
    pub fn at(&self, node_path: &str) -> PathBuf {
        self.root.join(node_path.trim_start_matches('/'))
    }

    /// Copies a bundled store (or any directory under fixtures/nodes) to `node_path`.
    pub fn place(&self, fixture_rel: &str, node_path: &str) -> PathBuf {
        let dst = self.at(node_path);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        let st = Command::new("cp")
            .arg("-a")
            .arg(fixture(fixture_rel))
            .arg(&dst)
            .status()
            .unwrap();
        assert!(st.success(), "cp -a {fixture_rel} {}", dst.display());
        dst
    }

    /// Writes a file (a configuration file, say) at `node_path`.
    pub fn write(&self, node_path: &str, text: &str) -> PathBuf {
        let p = self.at(node_path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Default for NodeTree {
    fn default() -> Self {
        NodeTree::new()
    }
}
