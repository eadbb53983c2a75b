//! The runtimes' own configuration files, read for the few settings that move a store or its
//! socket. A file that does not exist means the runtime's defaults; a file that exists but
//! cannot be read or parsed is an error naming it: the runtime itself would not start with it,
//! and guessing the stock root instead could patch (or miss) the wrong store.
//!
//! * Docker `daemon.json` (JSON): `data-root` (and its legacy name `graph`), `hosts` (the first
//!   `unix://` entry is the socket; `fd://` is systemd's socket unit, i.e. the default socket),
//!   `pidfile`. `live-restore` is read later by the Docker store itself, from the same file.
//! * containerd `config.toml` (TOML, format versions 1 (no `version` key), 2, 3 and 4):
//!   top-level `root` and `state`; the socket is `[grpc] address` up to format 3 and
//!   `[plugins.'io.containerd.server.v1.grpc'] address` in format 4 (containerd 2.3+, which
//!   migrates an older file's `[grpc]` there). `imports` are followed as containerd follows them
//!   (the layout module reads them): containerd 2.x's stock config imports
//!   `/etc/containerd/conf.d/*.toml`, where a drop-in can move the store.
//! * containers/storage `storage.conf` (`[storage] graphroot`, `runroot`) and CRI-O
//!   `crio.conf` with its `crio.conf.d/*.conf` drop-ins in name order, later ones winning
//!   (`[crio] root`, `runroot`, `[crio.api] listen`); CRI-O's own settings win over
//!   storage.conf's.

use std::path::{Path, PathBuf};

/// A configuration file that exists but cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}; fix it (the runtime would not start with it either) or give --runtime and --root explicitly", file.display())]
pub struct ConfigError {
    /// The file, as read (under the host root when there is one).
    pub file: PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    fn new(file: &Path, reason: impl Into<String>) -> Self {
        ConfigError {
            file: file.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// The bytes of `file`, `None` when it does not exist.
pub fn read_optional(file: &Path) -> Result<Option<Vec<u8>>, ConfigError> {
    match std::fs::read(file) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigError::new(file, format!("cannot be read: {e}"))),
    }
}

/// What `daemon.json` says about where dockerd keeps things.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DockerConfig {
    /// `data-root` (or the legacy `graph`).
    pub data_root: Option<PathBuf>,
    /// The first `unix://` entry of `hosts`.
    pub socket: Option<PathBuf>,
    /// `pidfile`.
    pub pidfile: Option<PathBuf>,
}

/// Parses a `daemon.json`.
pub fn parse_daemon_json(file: &Path, bytes: &[u8]) -> Result<DockerConfig, ConfigError> {
    let v: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| ConfigError::new(file, format!("is not valid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| ConfigError::new(file, "is not a JSON object"))?;
    let path_key = |key: &str| -> Result<Option<PathBuf>, ConfigError> {
        match obj.get(key) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) => absolute(file, key, s).map(Some),
            Some(other) => Err(ConfigError::new(
                file,
                format!("\"{key}\" is {other}, not a string"),
            )),
        }
    };
    let data_root = path_key("data-root")?;
    let graph = path_key("graph")?;
    if let (Some(d), Some(g)) = (&data_root, &graph) {
        if d != g {
            return Err(ConfigError::new(
                file,
                format!(
                    "sets both \"data-root\" ({}) and its legacy name \"graph\" ({}): dockerd refuses that",
                    d.display(),
                    g.display()
                ),
            ));
        }
    }
    let socket = match obj.get("hosts") {
        None => None,
        Some(serde_json::Value::Array(hosts)) => {
            let mut socket = None;
            for h in hosts {
                let h = h.as_str().ok_or_else(|| {
                    ConfigError::new(file, format!("\"hosts\" holds {h}, not a string"))
                })?;
                if let Some(p) = h.strip_prefix("unix://") {
                    if socket.is_none() {
                        socket = Some(absolute(file, "hosts", p)?);
                    }
                }
            }
            socket
        }
        Some(other) => {
            return Err(ConfigError::new(
                file,
                format!("\"hosts\" is {other}, not a list"),
            ))
        }
    };
    Ok(DockerConfig {
        data_root: data_root.or(graph),
        socket,
        pidfile: path_key("pidfile")?,
    })
}

/// What a containerd `config.toml` says about where containerd keeps things.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerdConfig {
    /// The config format version (1 when the file has no `version`).
    pub version: i64,
    /// `root`.
    pub root: Option<PathBuf>,
    /// `state`.
    pub state: Option<PathBuf>,
    /// The gRPC socket: `[plugins.'io.containerd.server.v1.grpc'] address` (format 4,
    /// containerd 2.3+), or before format 4 the `[grpc] address` that containerd migrates there
    /// when the file has no such plugin table.
    pub address: Option<PathBuf>,
    /// The file sets the gRPC server's plugin table (or a format < 4 `[grpc]` that becomes
    /// it): an imported file's table replaces the whole table of the files before it, address
    /// included, as containerd merges plugin tables by key.
    pub sets_grpc: bool,
    /// `imports`, as written (globs and paths relative to this file's directory allowed).
    pub imports: Vec<String>,
}

impl ContainerdConfig {
    /// `later`'s settings over these, as containerd merges an imported file into the ones
    /// read before it: a non-empty `root` or `state` wins, a gRPC plugin table replaces.
    pub fn overlay(self, later: ContainerdConfig) -> ContainerdConfig {
        ContainerdConfig {
            version: self.version.max(later.version),
            root: later.root.or(self.root),
            state: later.state.or(self.state),
            address: if later.sets_grpc {
                later.address
            } else {
                self.address
            },
            sets_grpc: self.sets_grpc || later.sets_grpc,
            imports: self.imports,
        }
    }
}

/// The gRPC server's plugin name from config format 4 on (containerd 2.3+).
const GRPC_SERVER_PLUGIN: &str = "io.containerd.server.v1.grpc";

/// Parses a containerd `config.toml` of format version 1, 2, 3 or 4 (one file: its
/// `imports` are returned for the caller to follow).
pub fn parse_containerd_toml(file: &Path, bytes: &[u8]) -> Result<ContainerdConfig, ConfigError> {
    let table = parse_toml(file, bytes)?;
    let version = match table.get("version") {
        None => 1,
        Some(toml::Value::Integer(v @ 1..=4)) => *v,
        Some(other) => {
            let shown = match other {
                toml::Value::Integer(v) => v.to_string(),
                toml::Value::String(s) => format!("{s:?}"),
                v => format!("a {}", v.type_str()),
            };
            return Err(ConfigError::new(
                file,
                format!("version = {shown} is not a containerd config format this tool reads (1, 2, 3 or 4)"),
            ));
        }
    };
    let grpc = sub_table(file, &table, "grpc")?;
    let legacy = match grpc {
        Some(g) => toml_path(file, g, "grpc", "address")?,
        None => None,
    };
    let section = format!("plugins.'{GRPC_SERVER_PLUGIN}'");
    let plugin = match sub_table(file, &table, "plugins")? {
        Some(plugins) => match plugins.get(GRPC_SERVER_PLUGIN) {
            None => None,
            Some(toml::Value::Table(t)) => Some(t),
            Some(other) => {
                return Err(ConfigError::new(
                    file,
                    format!("[{section}] is {}, not a table", other.type_str()),
                ))
            }
        },
        None => None,
    };
    let (address, sets_grpc) = match plugin {
        // `address = ''` is containerd's "not set" (its own default config writes it so for
        // the servers it does not start)
        Some(p) if p.get("address").and_then(|a| a.as_str()) == Some("") => (None, true),
        Some(p) => (toml_path(file, p, &section, "address")?, true),
        // format 4 reads no [grpc]; before it, containerd moves [grpc] into the plugin table
        None if version < 4 => (legacy.clone(), grpc.is_some()),
        None => (None, false),
    };
    let imports = match table.get("imports") {
        None => Vec::new(),
        Some(toml::Value::Array(a)) => a
            .iter()
            .map(|i| {
                i.as_str().map(str::to_owned).ok_or_else(|| {
                    ConfigError::new(
                        file,
                        format!("imports holds a {}, not a string", i.type_str()),
                    )
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ConfigError::new(
                file,
                format!("imports is {}, not a list", other.type_str()),
            ))
        }
    };
    Ok(ContainerdConfig {
        version,
        root: toml_path(file, &table, "", "root")?,
        state: toml_path(file, &table, "", "state")?,
        address,
        sets_grpc,
        imports,
    })
}

/// containers/storage's `[storage]` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageConfig {
    /// `[storage] graphroot`.
    pub graphroot: Option<PathBuf>,
    /// `[storage] runroot`.
    pub runroot: Option<PathBuf>,
}

/// Parses a containers/storage `storage.conf`.
pub fn parse_storage_conf(file: &Path, bytes: &[u8]) -> Result<StorageConfig, ConfigError> {
    let table = parse_toml(file, bytes)?;
    let Some(storage) = sub_table(file, &table, "storage")? else {
        return Ok(StorageConfig::default());
    };
    Ok(StorageConfig {
        graphroot: toml_path(file, storage, "storage", "graphroot")?,
        runroot: toml_path(file, storage, "storage", "runroot")?,
    })
}

/// CRI-O's own `[crio]` / `[crio.api]` settings, as far as one file sets them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrioConfig {
    /// `[crio] root`.
    pub root: Option<PathBuf>,
    /// `[crio] runroot`.
    pub runroot: Option<PathBuf>,
    /// `[crio.api] listen`.
    pub listen: Option<PathBuf>,
}

impl CrioConfig {
    /// `later`'s settings over these (a drop-in over the main file).
    pub fn overlay(self, later: CrioConfig) -> CrioConfig {
        CrioConfig {
            root: later.root.or(self.root),
            runroot: later.runroot.or(self.runroot),
            listen: later.listen.or(self.listen),
        }
    }
}

/// Parses a `crio.conf` or one of its drop-ins.
pub fn parse_crio_conf(file: &Path, bytes: &[u8]) -> Result<CrioConfig, ConfigError> {
    let table = parse_toml(file, bytes)?;
    let Some(crio) = sub_table(file, &table, "crio")? else {
        return Ok(CrioConfig::default());
    };
    let api = sub_table(file, crio, "crio.api")?;
    Ok(CrioConfig {
        root: toml_path(file, crio, "crio", "root")?,
        runroot: toml_path(file, crio, "crio", "runroot")?,
        listen: match api {
            Some(a) => toml_path(file, a, "crio.api", "listen")?,
            None => None,
        },
    })
}

fn parse_toml(file: &Path, bytes: &[u8]) -> Result<toml::Table, ConfigError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ConfigError::new(file, format!("is not UTF-8 text: {e}")))?;
    text.parse::<toml::Table>().map_err(|e| {
        ConfigError::new(
            file,
            format!("is not valid TOML: {}", e.to_string().trim_end()),
        )
    })
}

/// `table[key]` as a table (`name` is its dotted name, for messages).
fn sub_table<'a>(
    file: &Path,
    table: &'a toml::Table,
    name: &str,
) -> Result<Option<&'a toml::Table>, ConfigError> {
    let key = name.rsplit('.').next().unwrap_or(name);
    match table.get(key) {
        None => Ok(None),
        Some(toml::Value::Table(t)) => Ok(Some(t)),
        Some(other) => Err(ConfigError::new(
            file,
            format!("[{name}] is {}, not a table", other.type_str()),
        )),
    }
}

/// `table[key]` as an absolute path (`section` names the table in messages).
fn toml_path(
    file: &Path,
    table: &toml::Table,
    section: &str,
    key: &str,
) -> Result<Option<PathBuf>, ConfigError> {
    let name = if section.is_empty() {
        key.to_string()
    } else {
        format!("[{section}] {key}")
    };
    match table.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => absolute(file, &name, s).map(Some),
        Some(other) => Err(ConfigError::new(
            file,
            format!("{name} is {}, not a string", other.type_str()),
        )),
    }
}

/// A configured path must be absolute: the runtimes refuse relative ones (or resolve them
/// against a working directory we cannot know).
fn absolute(file: &Path, key: &str, value: &str) -> Result<PathBuf, ConfigError> {
    let p = PathBuf::from(value);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(ConfigError::new(
            file,
            format!("{key} = {value:?} is not an absolute path"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f() -> &'static Path {
        Path::new("/etc/x")
    }

    #[test]
    fn daemon_json_settings_and_mistakes() {
        let c = parse_daemon_json(
            f(),
            br#"{"data-root": "/data/docker", "hosts": ["tcp://0.0.0.0:2375", "unix:///run/d.sock", "unix:///run/e.sock"], "pidfile": "/run/d.pid", "live-restore": true}"#,
        )
        .unwrap();
        assert_eq!(c.data_root.as_deref(), Some(Path::new("/data/docker")));
        assert_eq!(c.socket.as_deref(), Some(Path::new("/run/d.sock")));
        assert_eq!(c.pidfile.as_deref(), Some(Path::new("/run/d.pid")));
        let legacy =
            parse_daemon_json(f(), br#"{"graph": "/old/docker", "hosts": ["fd://"]}"#).unwrap();
        assert_eq!(legacy.data_root.as_deref(), Some(Path::new("/old/docker")));
        assert_eq!(legacy.socket, None, "fd:// is the default socket unit");
        assert_eq!(
            parse_daemon_json(f(), b"{}").unwrap(),
            DockerConfig::default()
        );
        for (bad, says) in [
            (&b"{not json"[..], "not valid JSON"),
            (b"[]", "not a JSON object"),
            (br#"{"data-root": 5}"#, "\"data-root\" is 5, not a string"),
            (br#"{"data-root": "docker"}"#, "not an absolute path"),
            (br#"{"data-root": "/a", "graph": "/b"}"#, "both"),
            (br#"{"hosts": "unix:///x"}"#, "not a list"),
        ] {
            let e = parse_daemon_json(f(), bad).unwrap_err();
            assert!(e.to_string().contains(says), "{e}");
            assert!(e.to_string().starts_with("/etc/x: "), "names the file: {e}");
        }
    }

    #[test]
    fn containerd_config_of_every_format_version() {
        let v1 = parse_containerd_toml(
            f(),
            b"root = \"/data/ctd\"\nstate = \"/run/ctd\"\n[grpc]\n  address = \"/run/ctd/ctd.sock\"\n[plugins.cri]\n  sandbox_image = \"pause\"\n",
        )
        .unwrap();
        assert_eq!(v1.version, 1);
        assert_eq!(v1.root.as_deref(), Some(Path::new("/data/ctd")));
        assert_eq!(v1.address.as_deref(), Some(Path::new("/run/ctd/ctd.sock")));
        let v2 = parse_containerd_toml(
            f(),
            b"version = 2\nroot = \"/r2\"\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"pause\"\n",
        )
        .unwrap();
        assert_eq!(
            (v2.version, v2.root.as_deref(), v2.address),
            (2, Some(Path::new("/r2")), None)
        );
        let v3 = parse_containerd_toml(
            f(),
            b"version = 3\nstate = \"/s3\"\n[grpc]\naddress = \"/a3.sock\"\n[plugins.'io.containerd.cri.v1.runtime']\nenable_selinux = false\n",
        )
        .unwrap();
        assert_eq!(v3.version, 3);
        assert_eq!(v3.state.as_deref(), Some(Path::new("/s3")));
        for (bad, says) in [
            (&b"root = "[..], "not valid TOML"),
            (b"version = 5", "version = 5"),
            (b"version = \"2\"", "not a containerd config format"),
            (b"root = 1", "root is integer, not a string"),
            (b"grpc = 1", "[grpc] is integer"),
            (b"[grpc]\naddress = [1]", "[grpc] address is array"),
            (b"root = \"var/lib\"", "not an absolute path"),
            (b"\xff", "not UTF-8"),
        ] {
            let e = parse_containerd_toml(f(), bad).unwrap_err();
            assert!(e.to_string().contains(says), "{says}: {e}");
        }
    }

    /// Docker 29 turns the containerd image store on for fresh installs through `features`
    /// (`containerd-snapshotter`); the containers stay in `<data-root>/containers`, so the
    /// file is read as any other: data-root, hosts, pidfile.
    #[test]
    fn docker_29_daemon_json_with_the_containerd_image_store() {
        let c = parse_daemon_json(
            f(),
            br#"{"features": {"containerd-snapshotter": true}, "data-root": "/srv/docker", "live-restore": true, "min-api-version": "1.24", "hosts": ["unix:///run/docker.sock"]}"#,
        )
        .unwrap();
        assert_eq!(c.data_root.as_deref(), Some(Path::new("/srv/docker")));
        assert_eq!(c.socket.as_deref(), Some(Path::new("/run/docker.sock")));
    }

    #[test]
    fn containerd_format_4_reads_the_grpc_server_plugin() {
        let v4 = parse_containerd_toml(
            f(),
            b"version = 4\nroot = '/r4'\nimports = ['/etc/containerd/conf.d/*.toml', 'local.toml']\n[grpc]\naddress = '/ignored.sock'\n[plugins.'io.containerd.server.v1.grpc']\naddress = '/a4.sock'\nuid = 0\n[plugins.'io.containerd.server.v1.debug']\naddress = ''\n",
        )
        .unwrap();
        assert_eq!(v4.version, 4);
        assert_eq!(v4.address.as_deref(), Some(Path::new("/a4.sock")));
        assert!(v4.sets_grpc);
        assert_eq!(v4.imports, ["/etc/containerd/conf.d/*.toml", "local.toml"]);
        let legacy_only =
            parse_containerd_toml(f(), b"version = 4\n[grpc]\naddress = '/x.sock'\n").unwrap();
        assert_eq!(
            (legacy_only.address, legacy_only.sets_grpc),
            (None, false),
            "format 4 reads no [grpc] address"
        );
        let v3 = parse_containerd_toml(f(), b"version = 3\n[grpc]\naddress = '/x.sock'\n").unwrap();
        assert_eq!(v3.address.as_deref(), Some(Path::new("/x.sock")));
        // an imported table replaces the address, an imported root wins, a file without either
        // changes neither
        let dropin = parse_containerd_toml(
            f(),
            b"version = 4\nroot = '/data/containerd'\n[plugins.'io.containerd.server.v1.grpc']\nuid = 1000\n",
        )
        .unwrap();
        let merged = v3.clone().overlay(dropin);
        assert_eq!(merged.root.as_deref(), Some(Path::new("/data/containerd")));
        assert_eq!(
            merged.address, None,
            "the imported plugin table has no address"
        );
        let nothing = parse_containerd_toml(f(), b"version = 4\n").unwrap();
        assert_eq!(v3.clone().overlay(nothing).address, v3.address);
        for (bad, says) in [
            (&b"imports = 'a.toml'"[..], "imports is string, not a list"),
            (b"imports = [1]", "imports holds a integer"),
            (
                b"version = 4\n[plugins]\n'io.containerd.server.v1.grpc' = 1",
                "not a table",
            ),
            (
                b"version = 4\n[plugins.'io.containerd.server.v1.grpc']\naddress = 'rel.sock'",
                "not an absolute path",
            ),
        ] {
            let e = parse_containerd_toml(f(), bad).unwrap_err();
            assert!(e.to_string().contains(says), "{says}: {e}");
        }
    }

    #[test]
    fn crio_and_storage_settings() {
        let s = parse_storage_conf(
            f(),
            b"[storage]\ndriver = \"overlay\"\ngraphroot = \"/g\"\nrunroot = \"/r\"\n[storage.options]\n",
        )
        .unwrap();
        assert_eq!(s.graphroot.as_deref(), Some(Path::new("/g")));
        assert_eq!(s.runroot.as_deref(), Some(Path::new("/r")));
        let main = parse_crio_conf(
            f(),
            b"[crio]\nroot = \"/c\"\n[crio.api]\nlisten = \"/l.sock\"\n",
        )
        .unwrap();
        let dropin = parse_crio_conf(
            f(),
            b"[crio]\nrunroot = \"/cr\"\n[crio.api]\nlisten = \"/m.sock\"\n",
        )
        .unwrap();
        let both = main.overlay(dropin);
        assert_eq!(both.root.as_deref(), Some(Path::new("/c")));
        assert_eq!(both.runroot.as_deref(), Some(Path::new("/cr")));
        assert_eq!(both.listen.as_deref(), Some(Path::new("/m.sock")));
        assert!(parse_storage_conf(f(), b"[storage\n").is_err());
        assert!(parse_crio_conf(f(), b"crio = 3")
            .unwrap_err()
            .to_string()
            .contains("[crio]"));
        assert!(parse_crio_conf(f(), b"[crio]\napi = 3")
            .unwrap_err()
            .to_string()
            .contains("[crio.api]"));
    }
}
