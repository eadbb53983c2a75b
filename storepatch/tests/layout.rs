//! Layout discovery on trees laid out as the distributions lay out a node: the bundled real
//! stores of fixtures/nodes are copied to the k3s, RKE2, MicroK8s and moved-root paths under a
//! temporary host root, with the runtime's configuration as such a node has it, and
//! `layout::find` must pick exactly that store, with its socket, and open it.

use std::os::unix::fs::symlink;
use std::path::Path;
use storepatch::layout::DetectError;
use storepatch::layout::{self, HostRoot, Layout};
use storepatch::RuntimeKind;

use testtools::node_tree::{fixture, NodeTree as Node};

/// What the layout tests ask of a node tree.
trait Discover {
    fn host(&self) -> HostRoot;
    fn find(&self) -> Result<layout::Found, DetectError>;
}

impl Discover for Node {
    fn host(&self) -> HostRoot {
        HostRoot::new(&self.root).unwrap()
    }

    fn find(&self) -> Result<layout::Found, DetectError> {
        layout::find(&self.host(), None, None)
    }
}

/// The number of records a store holds, read through the runtime's own open.
fn records(kind: RuntimeKind, root: &Path, options: &storepatch::StoreOptions) -> usize {
    let store = kind.runtime().open(root, options).unwrap();
    store.scan().unwrap().records.len()
}

const CONTAINERD_1_7: &str = "containerd-1.7/var/lib/containerd";
const CONTAINERD_1_6: &str = "containerd-1.6/var/lib/containerd";

/// A containerd config.toml of format `version` (1: no version key) moving root, state and
/// socket, with the plugin section spelled as that version spells it.
fn containerd_toml(version: u8, root: &str, state: &str, socket: &str) -> String {
    let (head, plugin) = match version {
        1 => ("", "[plugins.cri]\n  sandbox_image = \"registry.k8s.io/pause:3.8\"\n"),
        2 => (
            "version = 2\n",
            "[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.8\"\n",
        ),
        3 => (
            "version = 3\n",
            "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n  sandbox = \"registry.k8s.io/pause:3.10\"\n",
        ),
        _ => unreachable!(),
    };
    format!("{head}root = \"{root}\"\nstate = \"{state}\"\n\n[grpc]\n  address = \"{socket}\"\n\n{plugin}")
}

#[test]
fn k3s_node_is_found_with_its_socket() {
    let n = Node::new();
    let store = n.place(CONTAINERD_1_7, "/var/lib/rancher/k3s/agent/containerd");
    // What k3s writes (format 2 for its containerd 1.7 line).
    n.write(
        "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
        &containerd_toml(
            2,
            "/var/lib/rancher/k3s/agent/containerd",
            "/run/k3s/containerd",
            "/run/k3s/containerd/containerd.sock",
        ),
    );
    let f = n.find().unwrap();
    assert_eq!(
        (f.kind, f.layout),
        (RuntimeKind::Containerd, Some(Layout::K3s))
    );
    assert_eq!(f.root, store);
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/run/k3s/containerd/containerd.sock").as_path())
    );
    assert_eq!(
        records(f.kind, &f.root, &f.defaults),
        records(f.kind, &fixture(CONTAINERD_1_7), &Default::default())
    );
}

#[test]
fn rke2_node_is_found_with_a_version_3_config() {
    let n = Node::new();
    let store = n.place(CONTAINERD_1_6, "/var/lib/rancher/rke2/agent/containerd");
    n.write(
        "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
        &containerd_toml(
            3,
            "/var/lib/rancher/rke2/agent/containerd",
            "/run/k3s/containerd",
            "/run/k3s/containerd/containerd.sock",
        ),
    );
    let f = n.find().unwrap();
    assert_eq!(f.layout, Some(Layout::Rke2));
    assert_eq!(f.root, store);
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/run/k3s/containerd/containerd.sock").as_path())
    );
    assert!(records(f.kind, &f.root, &f.defaults) > 0);
}

#[test]
fn microk8s_node_is_found_from_its_flags_file_and_a_version_1_config() {
    let n = Node::new();
    let store = n.place(
        CONTAINERD_1_7,
        "/var/snap/microk8s/common/var/lib/containerd",
    );
    // The snap's flags file, as microk8s-resources/default-args/containerd ships it.
    n.write(
        "/var/snap/microk8s/current/args/containerd",
        "--config ${SNAP_DATA}/args/containerd.toml\n--root ${SNAP_COMMON}/var/lib/containerd\n--state ${SNAP_COMMON}/run/containerd\n--address ${SNAP_COMMON}/run/containerd.sock\n",
    );
    // An old-format (version 1) config whose root the flags override, as containerd does.
    n.write(
        "/var/snap/microk8s/current/args/containerd.toml",
        &containerd_toml(1, "/elsewhere", "/elsewhere-state", "/elsewhere.sock"),
    );
    let f = n.find().unwrap();
    assert_eq!(f.layout, Some(Layout::MicroK8s));
    assert_eq!(f.root, store);
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(
            n.at("/var/snap/microk8s/common/run/containerd.sock")
                .as_path()
        )
    );
    // Without the flags file the config's settings count, and the snap's defaults fill in.
    std::fs::remove_file(n.at("/var/snap/microk8s/current/args/containerd")).unwrap();
    n.write(
        "/var/snap/microk8s/current/args/containerd.toml",
        &containerd_toml(
            1,
            "/var/snap/microk8s/common/var/lib/containerd",
            "/var/snap/microk8s/common/run/containerd",
            "/var/snap/microk8s/common/run/other.sock",
        ),
    );
    let f = n.find().unwrap();
    assert_eq!((f.layout, f.root.clone()), (Some(Layout::MicroK8s), store));
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/var/snap/microk8s/common/run/other.sock").as_path())
    );
}

#[test]
fn containerd_root_moved_in_config_toml_of_each_format_version() {
    for version in [1, 2, 3] {
        let n = Node::new();
        let store = n.place(CONTAINERD_1_7, "/data/containerd");
        n.write(
            "/etc/containerd/config.toml",
            &containerd_toml(
                version,
                "/data/containerd",
                "/run/ctd",
                "/run/ctd/containerd.sock",
            ),
        );
        let f = n.find().unwrap();
        assert_eq!(f.layout, Some(Layout::Containerd), "version {version}");
        assert_eq!(f.root, store, "version {version}");
        assert_eq!(
            f.defaults.socket.as_deref(),
            Some(n.at("/run/ctd/containerd.sock").as_path()),
            "version {version}"
        );
        let d = Layout::Containerd.discover(&n.host()).unwrap();
        assert_eq!(d.state.as_deref(), Some(n.at("/run/ctd").as_path()));
        assert_eq!(d.read, vec![n.at("/etc/containerd/config.toml")]);
    }
}

/// The stock config of containerd 2.2, 2.3 LTS and 2.4 (`containerd config default` of the real
/// releases, fixtures/runtime-configs/generate.sh) with a drop-in in `conf.d/` that moves root,
/// state and socket, in that release's own format (4 from 2.3: the socket in the gRPC server
/// plugin's table): the default config imports `/etc/containerd/conf.d/*.toml`, and containerd
/// would use the drop-in's store.
#[test]
fn containerd_2_x_stock_config_and_a_conf_d_drop_in_move_the_store() {
    for version in ["2.2.9", "2.3.7", "2.4.2"] {
        let stock = std::fs::read_to_string(
            testtools::fixtures_dir()
                .join(format!("runtime-configs/containerd-{version}.default.toml")),
        )
        .unwrap();
        let format = if version.starts_with("2.2") { 3 } else { 4 };
        assert!(
            stock.starts_with(&format!("version = {format}\n"))
                && stock.contains("imports = ['/etc/containerd/conf.d/*.toml']"),
            "{version}: the stock config is format {format} and imports conf.d"
        );
        let n = Node::new();
        n.write("/etc/containerd/config.toml", &stock);
        // the stock config alone: the stock store and socket
        n.place(CONTAINERD_1_7, "/var/lib/containerd");
        let f = n.find().unwrap();
        assert_eq!(f.root, n.at("/var/lib/containerd"), "{version}: stock root");
        assert_eq!(
            f.defaults.socket.as_deref(),
            Some(n.at("/run/containerd/containerd.sock").as_path()),
            "{version}: stock socket (format {format})"
        );
        let store = n.place(CONTAINERD_1_7, "/data/containerd");
        let socket = if format == 4 {
            "[plugins.'io.containerd.server.v1.grpc']\n  address = '/run/ctd/containerd.sock'\n"
        } else {
            "[grpc]\n  address = '/run/ctd/containerd.sock'\n"
        };
        n.write(
            "/etc/containerd/conf.d/50-data.toml",
            &format!("version = {format}\nroot = '/data/containerd'\nstate = '/run/ctd'\n{socket}"),
        );
        // not a .toml: not imported
        n.write(
            "/etc/containerd/conf.d/50-data.toml.bak",
            "root = '/elsewhere'\n",
        );
        let f = n.find().unwrap();
        assert_eq!(f.root, store, "{version}: the drop-in's root");
        assert_eq!(
            f.defaults.socket.as_deref(),
            Some(n.at("/run/ctd/containerd.sock").as_path()),
            "{version}: the drop-in's socket"
        );
        let d = Layout::Containerd.discover(&n.host()).unwrap();
        assert_eq!(d.state.as_deref(), Some(n.at("/run/ctd").as_path()));
        assert_eq!(
            d.read,
            vec![
                n.at("/etc/containerd/config.toml"),
                n.at("/etc/containerd/conf.d/50-data.toml")
            ],
            "{version}: every file read, the drop-in after the main file"
        );
        // a broken drop-in is an error naming it, as containerd would not start with it
        n.write("/etc/containerd/conf.d/60-broken.toml", "root = 1\n");
        let e = n.find().unwrap_err().to_string();
        assert!(e.contains("60-broken.toml"), "{version}: {e}");
    }
}

#[test]
fn containerd_import_that_does_not_exist_is_an_error() {
    let n = Node::new();
    n.place(CONTAINERD_1_7, "/var/lib/containerd");
    n.write(
        "/etc/containerd/config.toml",
        "version = 4\nimports = ['extra.toml']\n",
    );
    let e = n.find().unwrap_err().to_string();
    assert!(
        e.contains("/etc/containerd/extra.toml") && e.contains("does not exist"),
        "a relative import is read beside the file that names it: {e}"
    );
    n.write(
        "/etc/containerd/extra.toml",
        "root = '/var/lib/containerd'\n",
    );
    assert_eq!(n.find().unwrap().root, n.at("/var/lib/containerd"));
}

#[test]
fn docker_data_root_moved_in_daemon_json_through_node_links() {
    let n = Node::new();
    // The data-root is a link on the node (absolute, as the node sees it): resolved inside
    // the host root, not on this machine.
    let store = n.place("docker-20.10/var/lib/docker", "/disk2/docker");
    std::fs::create_dir_all(n.at("/srv")).unwrap();
    symlink("/disk2/docker", n.at("/srv/docker")).unwrap();
    std::fs::create_dir_all(n.at("/run")).unwrap();
    std::fs::create_dir_all(n.at("/var")).unwrap();
    symlink("../run", n.at("/var/run")).unwrap();
    n.write(
        "/etc/docker/daemon.json",
        r#"{"data-root": "/srv/docker", "hosts": ["unix:///var/run/dockerd.sock"], "pidfile": "/var/run/dockerd.pid", "live-restore": true}"#,
    );
    let f = n.find().unwrap();
    assert_eq!(
        (f.kind, f.layout),
        (RuntimeKind::Docker, Some(Layout::Docker))
    );
    assert_eq!(f.root, store);
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/run/dockerd.sock").as_path())
    );
    assert_eq!(
        f.defaults.pidfile.as_deref(),
        Some(n.at("/run/dockerd.pid").as_path())
    );
    // The store reads live-restore from the node's daemon.json, not this machine's.
    let store = f.kind.runtime().open(&f.root, &f.defaults).unwrap();
    assert!(
        store.scan().unwrap().warnings.is_empty(),
        "live-restore read as on"
    );
    assert!(store.precheck().is_ok());
}

#[test]
fn crio_graphroot_and_runroot_moved_in_storage_conf_and_crio_conf_d() {
    let n = Node::new();
    let graph = n.place("crio-1.30/var/lib/containers/storage", "/mnt/containers");
    let run = n.place("crio-1.30/run/containers/storage", "/run/cstorage");
    n.write(
        "/etc/containers/storage.conf",
        "[storage]\ndriver = \"overlay\"\ngraphroot = \"/mnt/containers\"\nrunroot = \"/run/cstorage\"\n",
    );
    // OpenShift's way: drop-ins in crio.conf.d, the later name winning.
    n.write(
        "/etc/crio/crio.conf",
        "[crio.api]\nlisten = \"/run/crio-main.sock\"\n",
    );
    n.write(
        "/etc/crio/crio.conf.d/00-default.conf",
        "[crio.api]\nlisten = \"/run/crio-00.sock\"\n",
    );
    n.write(
        "/etc/crio/crio.conf.d/10-ocp.conf",
        "[crio.api]\nlisten = \"/run/crio/crio.sock\"\n",
    );
    n.write("/etc/crio/crio.conf.d/README", "not a drop-in: not read");
    let f = n.find().unwrap();
    assert_eq!((f.kind, f.layout), (RuntimeKind::Crio, Some(Layout::Crio)));
    assert_eq!(f.root, graph);
    assert_eq!(f.defaults.runroot.as_deref(), Some(run.as_path()));
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/run/crio/crio.sock").as_path())
    );
    let store = f.kind.runtime().open(&f.root, &f.defaults).unwrap();
    let scan = store.scan().unwrap();
    assert!(
        !scan.warnings.iter().any(|w| w.message.contains("runroot")),
        "the runroot from storage.conf is used: {:?}",
        scan.warnings
    );
    // CRI-O's version file is the node's, found through its /var/run -> /run link.
    let missing = n.at("/var/run/crio/version").display().to_string();
    assert!(
        scan.warnings
            .iter()
            .any(|w| w.message.contains(&missing) && w.message.contains("is missing")),
        "{:?}",
        scan.warnings
    );
    n.place("crio-1.30/run/crio", "/run/crio");
    std::fs::create_dir_all(n.at("/var")).unwrap();
    symlink("/run", n.at("/var/run")).unwrap();
    let store = f.kind.runtime().open(&f.root, &f.defaults).unwrap();
    let warnings = store.scan().unwrap().warnings;
    let version_file = n.at("/run/crio/version").display().to_string();
    assert!(
        warnings
            .iter()
            .any(|w| w.message.contains(&version_file) && w.message.contains("says")),
        "{warnings:?}"
    );
    // [crio] root wins over storage.conf's graphroot.
    let moved = n.place("crio-1.30/var/lib/containers/storage", "/var/lib/crio-root");
    n.write(
        "/etc/crio/crio.conf.d/20-root.conf",
        "[crio]\nroot = \"/var/lib/crio-root\"\n",
    );
    std::fs::remove_dir_all(&graph).unwrap();
    assert_eq!(n.find().unwrap().root, moved);
}

#[test]
fn stock_layouts_are_found_at_their_stock_paths() {
    for (fixture_rel, node_path, kind) in [
        (
            CONTAINERD_1_7,
            "/var/lib/containerd",
            RuntimeKind::Containerd,
        ),
        (
            "docker-20.10/var/lib/docker",
            "/var/lib/docker",
            RuntimeKind::Docker,
        ),
        (
            "crio-1.30/var/lib/containers/storage",
            "/var/lib/containers/storage",
            RuntimeKind::Crio,
        ),
    ] {
        let n = Node::new();
        let store = n.place(fixture_rel, node_path);
        let f = n.find().unwrap();
        assert_eq!((f.kind, &f.root), (kind, &store), "{node_path}");
        assert!(f.defaults.socket.unwrap().starts_with(&n.root));
    }
}

#[test]
fn several_stores_are_refused_with_every_candidate_named_unless_one_is_picked() {
    let n = Node::new();
    // A Docker node: dockerd runs on containerd, which has a store of its own.
    let docker = n.place("docker-20.10/var/lib/docker", "/var/lib/docker");
    let containerd = n.place(CONTAINERD_1_6, "/var/lib/containerd");
    let k3s = n.place(CONTAINERD_1_7, "/var/lib/rancher/k3s/agent/containerd");
    let e = n.find().unwrap_err();
    assert!(matches!(e, DetectError::Several { .. }), "{e}");
    let msg = e.to_string();
    for root in [&docker, &containerd, &k3s] {
        assert!(
            msg.contains(&root.display().to_string()),
            "names {}: {msg}",
            root.display()
        );
    }
    assert!(msg.contains("(k3s)") && msg.contains("--root"), "{msg}");
    // The runtime picks Docker (one store of that runtime) ...
    let f = layout::find(&n.host(), Some(RuntimeKind::Docker), None).unwrap();
    assert_eq!(f.root, docker);
    // ... but containerd still has two: refused again, naming those two.
    let e = layout::find(&n.host(), Some(RuntimeKind::Containerd), None).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("(k3s)") && msg.contains("(containerd)") && !msg.contains("docker ("),
        "{msg}"
    );
    // A root picks one, and the layout it belongs to gives the socket.
    let f = layout::find(&n.host(), None, Some(&k3s)).unwrap();
    assert_eq!(
        (f.kind, f.layout),
        (RuntimeKind::Containerd, Some(Layout::K3s))
    );
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/run/k3s/containerd/containerd.sock").as_path())
    );
}

#[test]
fn nothing_found_names_every_place_looked_at() {
    let n = Node::new();
    let e = n.find().unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, DetectError::NoneFound { .. }), "{msg}");
    for l in Layout::ALL {
        let root = n.at(&l.default_root().display().to_string());
        assert!(msg.contains(&root.display().to_string()), "{msg}");
    }
    assert!(msg.contains("--host-root"), "hints at a host root: {msg}");
}

#[test]
fn broken_config_files_are_errors_naming_them_never_the_stock_root() {
    let cases: [(&str, &str); 5] = [
        ("/etc/docker/daemon.json", "{\"data-root\": \"/srv/docker\""),
        ("/etc/containerd/config.toml", "root = \"/data/containerd\n"),
        ("/etc/containerd/config.toml", "version = 9\n"),
        (
            "/etc/containers/storage.conf",
            "[storage\ngraphroot = \"/x\"\n",
        ),
        (
            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "[grpc]\naddress = 3\n",
        ),
    ];
    for (file, text) in cases {
        let n = Node::new();
        // A stock store that a silent fallback would pick.
        n.place(CONTAINERD_1_7, "/var/lib/containerd");
        let path = n.write(file, text);
        let e = n.find().unwrap_err();
        assert!(matches!(e, DetectError::Config(_)), "{file}: {e}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
    // Unreadable: a directory where the file should be.
    let n = Node::new();
    n.place(CONTAINERD_1_7, "/var/lib/containerd");
    std::fs::create_dir_all(n.at("/etc/docker/daemon.json")).unwrap();
    let e = n.find().unwrap_err();
    assert!(e.to_string().contains("cannot be read"), "{e}");
    assert!(e.to_string().contains("daemon.json"), "{e}");
}

#[test]
fn hostile_links_in_the_node_are_resolved_inside_it() {
    let n = Node::new();
    let store = n.place(CONTAINERD_1_7, "/var/lib/containerd");
    // A config outside the host root that would move the root if it were followed out.
    let outside = n.root.parent().unwrap().join("outside.toml");
    std::fs::write(
        &outside,
        containerd_toml(2, "/nowhere", "/nowhere", "/nowhere.sock"),
    )
    .unwrap();
    std::fs::create_dir_all(n.at("/etc/containerd")).unwrap();
    symlink(&outside, n.at("/etc/containerd/config.toml")).unwrap();
    // A data-root link climbing far above the node's /.
    n.write(
        "/etc/docker/daemon.json",
        r#"{"data-root": "/var/lib/docker-link"}"#,
    );
    symlink("../../../../../../../../..", n.at("/var/lib/docker-link")).unwrap();
    let f = n.find().unwrap();
    assert_eq!(
        f.root, store,
        "the outside config was not read: it is not on the node"
    );
    let d = Layout::Docker.discover(&n.host()).unwrap();
    assert_eq!(d.root, n.root, "`..` stops at the host root");
    // `/` is this machine itself, and a file is no host root.
    assert_eq!(HostRoot::new(Path::new("/")).unwrap(), HostRoot::none());
    assert!(HostRoot::new(&outside).is_err());
}

#[test]
fn a_root_of_no_known_layout_gets_the_runtime_defaults_but_not_another_stores_runroot() {
    let n = Node::new();
    n.place(
        "crio-1.30/run/containers/storage",
        "/run/containers/storage",
    );
    let copy = n.place("crio-1.30/var/lib/containers/storage", "/backup/storage");
    let f = layout::find(&n.host(), None, Some(&copy)).unwrap();
    assert_eq!((f.kind, f.layout), (RuntimeKind::Crio, None));
    assert_eq!(
        f.defaults.runroot, None,
        "the stock runroot belongs to the stock graphroot"
    );
    assert_eq!(
        f.defaults.socket.as_deref(),
        Some(n.at("/var/run/crio/crio.sock").as_path())
    );
}
