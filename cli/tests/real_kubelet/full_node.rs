//! A full node (issue 52): the lab's node filled to the pod counts of `LAB_FULL_NODE` (default
//! `8,110,250`: the suite's own pods alone, the kubelet's default `maxPods`, and the most the
//! lab's /24 pod subnet holds with `maxPods: 250`), then upgraded 1.30 → 1.31 and backed out
//! with `kubelet-rehash upgrade` at each count, on the real kubelet. Every container keeps its
//! id and process (`with_tool` asserts it, and that the plan predicted no restart), a static
//! pod running Debian's etcd as kubeadm runs it (derived UID, probed on its metrics port)
//! included; and the window is measured in its parts, per pod count:
//! - the kubelet down: its stop begun until the new one's health endpoint answered;
//! - the runtime down: its stop begun until its API answered again;
//! - our own steps: checking the containers' processes, the patch (plan of the stopped store,
//!   backup, rewrite, read back), installing the binary and `verify --live`;
//! - the new kubelet's first pod syncs: its start until its pod workers have processed as many
//!   work items as the node has pods (`kubelet_pod_worker_duration_seconds_count`, every
//!   type, on the kubelet's own metrics endpoint, polled every 200 ms). A lower bound of "every
//!   pod synced once": a pod's first item is counted under the type of the last work merged
//!   into it (a `create`, or a `sync` when its PLEG event came first), and a pod synced twice
//!   in those seconds counts twice. The metrics give no per-pod answer, and the kubelet logs
//!   its syncs only at `--v=4`, which would slow the very window measured.
//!
//! One lab for every count (scaled up between them), so the counts differ in pods only.
//! The figures go to `target/real-kubelet/full-node.md` (docs/lab.md keeps them).

use super::*;

/// The pair every count is upgraded across (and backed out).
const FROM: &str = "1.30";
const TO: &str = "1.31";

/// The pod counts to fill the node to (`LAB_FULL_NODE`); a count below what the suite's own
/// pods make is run with those alone.
fn pod_counts() -> Vec<usize> {
    let spec = std::env::var("LAB_FULL_NODE").unwrap_or_else(|_| "8,110,250".into());
    let mut counts: Vec<usize> = spec
        .split(',')
        .map(|c| {
            c.trim()
                .parse()
                .unwrap_or_else(|_| panic!("LAB_FULL_NODE: pod counts, as 8,110,250 (got {spec})"))
        })
        .collect();
    counts.sort_unstable();
    assert!(
        counts.last().is_some_and(|&c| c <= 250),
        "LAB_FULL_NODE: at most 250 pods (the lab's pod subnet is a /24)"
    );
    counts
}

/// Debian's etcd (the lab's control plane runs the same binary) as kubeadm's etcd static pod:
/// no `metadata.uid`, so the kubelet derives its UID; `system-node-critical`; a startup and a
/// liveness probe on its metrics port. The busybox image holds no libc, so the host's loader
/// and libraries are mounted read-only, as the binary is.
fn etcd_static_pod(etcd: &Path, data: &Path) -> String {
    let bin_dir = etcd.parent().unwrap().display();
    let bin = etcd.file_name().unwrap().to_string_lossy();
    let data = data.display();
    format!(
        r#"# etcd as kubeadm runs it on a control-plane node
apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
  labels: {{component: etcd, tier: control-plane}}
spec:
  priorityClassName: system-node-critical
  terminationGracePeriodSeconds: 5
  containers:
  - name: etcd
    image: k8s-lab.local/busybox:1.0
    imagePullPolicy: Never
    command:
    - /lib64/ld-linux-x86-64.so.2
    - /opt/etcd/{bin}
    - --name=lab-node
    - --data-dir=/var/lib/etcd
    - --listen-client-urls=http://127.0.0.1:2379
    - --advertise-client-urls=http://127.0.0.1:2379
    - --listen-peer-urls=http://127.0.0.1:2380
    - --initial-advertise-peer-urls=http://127.0.0.1:2380
    - --initial-cluster=lab-node=http://127.0.0.1:2380
    - --listen-metrics-urls=http://127.0.0.1:2381
    livenessProbe:
      exec: {{command: [wget, -q, -O-, "http://127.0.0.1:2381/health"]}}
      periodSeconds: 10
      failureThreshold: 8
    startupProbe:
      exec: {{command: [wget, -q, -O-, "http://127.0.0.1:2381/health"]}}
      periodSeconds: 2
      failureThreshold: 24
    resources: {{requests: {{cpu: 10m, memory: 20Mi}}}}
    volumeMounts:
    - {{name: etcd-bin, mountPath: /opt/etcd, readOnly: true}}
    - {{name: lib64, mountPath: /lib64, readOnly: true}}
    - {{name: libs, mountPath: /lib/x86_64-linux-gnu, readOnly: true}}
    - {{name: etcd-data, mountPath: /var/lib/etcd}}
  volumes:
  - {{name: etcd-bin, hostPath: {{path: {bin_dir}, type: Directory}}}}
  - {{name: lib64, hostPath: {{path: /lib64, type: Directory}}}}
  - {{name: libs, hostPath: {{path: /lib/x86_64-linux-gnu, type: Directory}}}}
  - {{name: etcd-data, hostPath: {{path: {data}, type: DirectoryOrCreate}}}}
"#
    )
}

/// The filler: idle pods of one busybox container each, requesting next to nothing.
fn filler(replicas: usize) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: fill}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: fill}}}}
  template:
    metadata: {{labels: {{app: fill}}}}
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: main
        image: k8s-lab.local/busybox:1.0
        imagePullPolicy: Never
        command: ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"]
        resources: {{requests: {{cpu: 1m, memory: 1Mi}}}}
"#
    )
}

/// The kubelet's own metrics: (its process start, Unix ms; the pods its workers synced once).
fn kubelet_synced(lab: &Lab) -> Option<(u64, usize)> {
    let env = std::fs::read_to_string(Path::new(lab.var("LAB_DIR")).join("env")).ok()?;
    let var = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
            .map(str::to_string)
    };
    // the lab's admin client, addressed to the kubelet's own port
    let kubelet = watch::AdminCurl {
        pki: Path::new(lab.var("LAB_DIR")).join("pki"),
        server: format!("https://{}:{}", var("node_ip")?, var("kubelet_port")?),
    };
    let o = kubelet
        .command("/metrics")
        .args(["--max-time", "2"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&o.stdout);
    let value = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix)?.trim().parse::<f64>().ok())
    };
    let started = value("process_start_time_seconds ")?;
    // a pod's first work item is a `create`, or an `update` or `sync` when a change of the pod
    // or its PLEG event (the new kubelet's first relist reports every container as started)
    // came in before its worker took the create: the pod workers merge pending work, and count
    // the item under its last type. Every pod synced once means at least as many items as pods
    let processed: f64 = ["create", "update", "sync"]
        .iter()
        .filter_map(|t| {
            value(&format!(
                "kubelet_pod_worker_duration_seconds_count{{operation_type=\"{t}\"}} "
            ))
        })
        .sum();
    Some(((started * 1000.0) as u64, processed as usize))
}

/// Polls the kubelet's metrics until a kubelet started after `since_ms` has synced `pods`
/// pods once; the Unix ms it was first seen so (within the 200 ms poll), or `None` after
/// `timeout`.
fn first_sync_seen(lab: &Lab, since_ms: u64, pods: usize, stop: &AtomicBool) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
        if let Some((started, created)) = kubelet_synced(lab) {
            if started >= since_ms && created >= pods {
                return Some(unix_ms());
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    None
}

/// One upgrade or back-out at one pod count, in its parts (seconds).
struct FullRow {
    pods: usize,
    containers: usize,
    what: String,
    restarted: usize,
    kubelet_down_s: f64,
    runtime_down_s: f64,
    our_steps_s: f64,
    first_sync_s: f64,
}

/// (start, end) of the step's last successful run, Unix ms.
fn step_span(state: &Value, step: &str) -> Option<(u64, u64)> {
    state["steps"]
        .as_array()?
        .iter()
        .rev()
        .find(|s| s["step"] == step && s["outcome"] == "ok")
        .and_then(|s| Some((s["started_unix_ms"].as_u64()?, s["ended_unix_ms"].as_u64()?)))
}

fn span_s(state: &Value, from: &str, to: &str, what: &str) -> f64 {
    let (a, _) = step_span(state, from).unwrap_or_else(|| panic!("{what}: step {from}: {state}"));
    let (_, b) = step_span(state, to).unwrap_or_else(|| panic!("{what}: step {to}: {state}"));
    (b.saturating_sub(a)) as f64 / 1000.0
}

/// Upgrades (or backs out) with the tool while watching the new kubelet's first sync.
#[allow(clippy::too_many_arguments)]
fn measured(
    lab: &Lab,
    pods_file: &Path,
    to: &str,
    to_full: &str,
    kubelet: &Path,
    state_dir: &Path,
    pair: &str,
    what: &str,
) -> FullRow {
    let pods = lab.pods_of_node()["items"].as_array().unwrap().len();
    let since = unix_ms();
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let lab_dir = lab.dir.clone();
        let env = lab.env.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let lab = Lab {
                dir: lab_dir,
                env,
                down: true,
                node: None,
            };
            first_sync_seen(&lab, since, pods, &stop)
        })
    };
    let up = with_tool(lab, pods_file, to, to_full, kubelet, state_dir, pair, what);
    // with_tool waited for the node to settle and 15 s more: the sync is seen by now or never
    stop.store(true, Ordering::Relaxed);
    let synced = watcher.join().unwrap().unwrap_or_else(|| {
        panic!("{pair}: {what}: the new kubelet processed as many pod syncs as the node has pods ({pods}; kubelet_pod_worker_duration_seconds_count)")
    });
    let (kubelet_started, _) = step_span(&up.state, "start-kubelet").unwrap_or_else(|| {
        panic!(
            "{pair}: {what}: the upgrade started the kubelet: {}",
            up.state
        )
    });
    let ours: f64 = [
        "check-containers",
        "patch",
        "install-kubelet",
        "kubelet-flags",
        "verify-live",
    ]
    .iter()
    .filter_map(|s| step_span(&up.state, s))
    .map(|(a, b)| b.saturating_sub(a) as f64 / 1000.0)
    .sum();
    FullRow {
        pods,
        containers: up.before.len(),
        what: what.to_string(),
        restarted: up.restarted.len(),
        kubelet_down_s: span_s(&up.state, "stop-kubelet", "wait-healthy", what),
        runtime_down_s: span_s(&up.state, "stop-runtime", "start-runtime", what),
        our_steps_s: ours,
        first_sync_s: synced.saturating_sub(kubelet_started) as f64 / 1000.0,
    }
}

#[test]
fn the_real_kubelet_keeps_every_container_of_a_full_node() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the lab needs root (CI runs scripts/test.sh as root)"
    );
    let counts = pod_counts();
    let max_pods = counts.last().copied().unwrap_or(0).max(110);
    let t = tempfile::tempdir().unwrap();
    let state_dir = t.path().join("state");
    std::fs::create_dir(&state_dir).unwrap();
    let lab = Lab::up_with(
        FROM,
        TO,
        "containerd",
        &[],
        &["--max-pods".to_string(), max_pods.to_string()],
        &t.path().join("lab"),
    );
    let from_v = lab.var("KUBELET_VERSION").to_string();
    let to_v = lab.var("CONTROL_PLANE_VERSION").to_string();
    let (new_kubelet, old_kubelet) = (built_kubelet(TO), built_kubelet(FROM));
    lab.apply(&workloads(minor_of(FROM)));
    let manifests = Path::new(lab.var("MANIFESTS"));
    let etcd_manifest = manifests.join("etcd.yaml");
    std::fs::write(
        &etcd_manifest,
        etcd_static_pod(
            Path::new(lab.var("ETCD_BIN")),
            &Path::new(lab.var("LAB_DIR")).join("etcd-static"),
        ),
    )
    .unwrap();
    wait_settled(&lab, &from_v, "full node: the suite's pods and etcd");
    let base = lab.pods_of_node()["items"].as_array().unwrap().len();
    let pods_file = t.path().join("pods.json");
    let mut rows = Vec::new();
    for &count in &counts {
        let fill = count.saturating_sub(base);
        lab.apply(&filler(fill));
        let deadline = Instant::now() + Duration::from_secs(600);
        while lab.pods_of_node()["items"].as_array().unwrap().len() < base + fill {
            assert!(
                Instant::now() < deadline,
                "full node: {} pods scheduled to the node in 600 s",
                base + fill
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        wait_settled(&lab, &from_v, &format!("full node: {count} pods"));
        // the endpoint controller and readiness have caught up
        std::thread::sleep(Duration::from_secs(5));
        let pair = format!("full node ({} pods) {FROM} → {TO}", base + fill);
        let before_etcd = observe(&lab)
            .into_iter()
            .find(|(k, _)| k.starts_with("kube-system/etcd-"))
            .unwrap_or_else(|| panic!("{pair}: the etcd static pod runs"));
        let up = measured(
            &lab,
            &pods_file,
            TO,
            &to_v,
            &new_kubelet,
            &state_dir,
            &pair,
            "upgrade",
        );
        // etcd's manifest pinned to the UID the old kubelet derived, its container kept (with_tool
        // held every container to its id and pid; etcd is named here because it is the point)
        let pinned: Value =
            serde_yaml::from_str(&std::fs::read_to_string(&etcd_manifest).unwrap()).unwrap();
        assert!(
            pinned["metadata"]["uid"]
                .as_str()
                .is_some_and(rehash::static_pods::is_derived_form),
            "{pair}: the upgrade pinned etcd's derived UID in its manifest"
        );
        let after_etcd = observe(&lab).remove(&before_etcd.0);
        assert_eq!(
            after_etcd.as_ref().map(|s| (s.id.as_str(), s.pid)),
            Some((before_etcd.1.id.as_str(), before_etcd.1.pid)),
            "{pair}: the etcd static pod keeps its container id and pid across the upgrade"
        );
        rows.push(up);
        let back = measured(
            &lab,
            &pods_file,
            FROM,
            &from_v,
            &old_kubelet,
            &state_dir,
            &pair,
            "back-out",
        );
        rows.push(back);
        write_full_node(&rows);
    }
}

/// `target/real-kubelet/full-node.md`: a row per count and direction.
fn write_full_node(rows: &[FullRow]) {
    let mut md = String::from(
        "| pods | containers | run | restarted | kubelet down s | runtime down s | our steps s | new kubelet's first pod syncs s |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} | {:.2} | {:.1} |\n",
            r.pods,
            r.containers,
            r.what,
            r.restarted,
            r.kubelet_down_s,
            r.runtime_down_s,
            r.our_steps_s,
            r.first_sync_s
        ));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/real-kubelet");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("full-node.md"), &md).unwrap();
    eprintln!("real_kubelet: full node:\n{md}");
}
