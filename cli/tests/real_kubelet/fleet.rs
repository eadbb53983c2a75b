//! A multi-node lab (issue 53): one control plane, five real kubelets on this machine, each
//! its own node with its own runtime, bridge, cgroup root and `system:node:<name>` client
//! certificate: kubelet 1.30 on containerd (`up`), then (`add-node`) kubelet 1.30 on CRI-O,
//! kubelet 1.31 on containerd (already where the fleet goes: nothing to do there), and a twin
//! of each of the first two as controls. Every node carries a pod from the API server and a
//! static pod of its own. Every node's plan is asked before any node is touched; then, node
//! by node, `kubelet-rehash upgrade --to 1.31` on the first two, exactly as on a one-node lab
//! but given that node's `_i` lines and `k8s-lab.sh VERB --node NAME`, and on the controls the
//! new kubelet swapped in without the tool. The real kubelets judge it: with the tool nothing
//! restarts; without it exactly what the plan said; and no node's turn touches another node's
//! containers (same id, same process).
//!
//! The figures (per node: predicted restarts without / with the tool, observed without on the
//! controls and with the tool on the others) go to `target/real-kubelet/fleet.md`.
//!
//! The second test runs deploy/ansible/ over a three-node lab with an injected failure.

use super::*;

/// The control plane and the version the fleet goes to.
const TO: &str = "1.31";
/// Where the two nodes with something to do start.
const FROM: &str = "1.30";

/// A pod of node `node` from the API server (pinned by `nodeName`, as a DaemonSet's are).
fn pinned_pod(name: &str, node: &str) -> String {
    let pod = idle_pod(&format!("name: {name}, namespace: default"), "");
    pod.replace("spec:\n", &format!("spec:\n  nodeName: {node}\n"))
}

/// `kubectl get pods -A --field-selector spec.nodeName=NODE -o json` into a file, for `plan`.
fn pods_file(node: &Lab, tmp: &Path, i: usize) -> PathBuf {
    let f = tmp.join(format!("pods-{i}.json"));
    node.write_pods(&f);
    f
}

/// What the fleet test does with a node.
#[derive(Clone, Copy, PartialEq)]
enum Turn {
    /// `kubelet-rehash upgrade`: nothing may restart
    Tool,
    /// already on the target: nothing to do
    Nothing,
    /// the new kubelet swapped in without the tool: exactly what the plan calls a restart
    /// without the tool restarts (a twin of a tool node, so the fleet's prediction is judged
    /// both ways on each runtime)
    Control,
}

#[test]
fn every_node_of_a_multi_node_lab_keeps_its_containers_through_its_own_upgrade() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the lab needs root (CI runs scripts/test.sh as root)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut lab = Lab::up(FROM, TO, "containerd", &[], &tmp.path().join("lab"));
    lab.add_node(&["--runtime", "crio"]);
    lab.add_node(&["--kubelet", TO]);
    lab.add_node(&[]);
    lab.add_node(&["--runtime", "crio"]);
    let lab_up_s = started.elapsed().as_secs_f64();
    let names: Vec<String> = lab
        .var("NODES")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let want = [
        ("containerd", FROM, Turn::Tool),
        ("crio", FROM, Turn::Tool),
        ("containerd", TO, Turn::Nothing),
        ("containerd", FROM, Turn::Control),
        ("crio", FROM, Turn::Control),
    ];
    assert_eq!(
        names.len(),
        want.len(),
        "k8s-lab.sh lists every node of the lab in NODES: {names:?}"
    );
    let nodes: Vec<Lab> = (1..=want.len()).map(|i| lab.node(i)).collect();
    for (i, (node, (runtime, version, _))) in nodes.iter().zip(want).enumerate() {
        assert_eq!(node.var("NODE"), names[i], "node {} is NODES' {i}th", i + 1);
        assert_eq!(
            node.var("RUNTIME"),
            runtime,
            "node {} runs {runtime}",
            i + 1
        );
        assert!(
            node.var("KUBELET_VERSION")
                .starts_with(&format!("{version}.")),
            "node {} runs kubelet {version}: {}",
            i + 1,
            node.var("KUBELET_VERSION")
        );
        // each node its own store, socket and kubelet: nothing shared
        for k in [
            "RUNTIME_ROOT",
            "RUNTIME_ENDPOINT",
            "KUBELET_DIR",
            "MANIFESTS",
            "KUBELET_PIDFILE",
        ] {
            for other in &nodes[..i] {
                assert_ne!(node.var(k), other.var(k), "every node has its own {k}");
            }
        }
        // registered with its own client certificate: the Node authorizer lets a kubelet
        // write only its own Node, so a Node of this name is this kubelet's
        let n = lab.json(&["get", "node", node.var("NODE")]);
        assert_eq!(
            n["status"]["nodeInfo"]["kubeletVersion"]
                .as_str()
                .unwrap_or("")
                .trim_start_matches('v'),
            node.var("KUBELET_VERSION"),
            "node {} reports its own kubelet's version",
            i + 1
        );
    }
    for (i, node) in nodes.iter().enumerate() {
        lab.apply(&pinned_pod(&format!("fleet-{}", i + 1), node.var("NODE")));
        std::fs::write(
            Path::new(node.var("MANIFESTS")).join("fleet-static.yaml"),
            static_pod(&format!("fleet-static-{}", i + 1), None),
        )
        .unwrap();
    }
    for node in &nodes {
        wait_settled(node, node.var("KUBELET_VERSION"), node.var("NODE"));
    }
    let mut before: Vec<BTreeMap<String, Seen>> = nodes.iter().map(observe).collect();
    for (i, seen) in before.iter().enumerate() {
        assert_eq!(
            seen.len(),
            2,
            "node {} runs its pinned pod and its static pod: {seen:?}",
            i + 1
        );
    }
    // every node's plan, before any node is touched, told the node's kubelet version (as the
    // Node reports it): the hashes alone cannot tell 1.31 from 1.32-1.36, and for those a
    // static pod's derived UID would change
    let planned_at = Instant::now();
    let predicted: Vec<(BTreeSet<String>, BTreeSet<String>)> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let from = node.var("KUBELET_VERSION");
            let minor = &from[..from.rfind('.').unwrap()];
            planned_with(
                node,
                &pods_file(node, tmp.path(), i + 1),
                TO,
                &["--from", minor],
            )
        })
        .collect();
    let plan_s = planned_at.elapsed().as_secs_f64() / nodes.len() as f64;
    let kubelet = built_kubelet(TO);
    let to_v = built_version(&kubelet);
    let mut rows = vec![
        "| node | runtime | kubelet | containers | predicted restarts without / with the tool | observed without the tool (control) | observed with it |".to_string(),
        "|---|---|---|---|---|---|---|".to_string(),
    ];
    let mut control_restarted = BTreeSet::new();
    for (i, node) in nodes.iter().enumerate() {
        let turn = want[i].2;
        let (without, with) = &predicted[i];
        let observed = match turn {
            Turn::Nothing => {
                assert!(
                    without.is_empty() && with.is_empty(),
                    "the plan of a node already on {TO} restarts nothing: {:?}",
                    predicted[i]
                );
                "nothing to do"
            }
            Turn::Tool => {
                assert!(
                    with.is_empty(),
                    "node {}'s plan keeps every container with the tool: {with:?}",
                    i + 1
                );
                let state = tmp.path().join(format!("state-{}", i + 1));
                std::fs::create_dir_all(&state).unwrap();
                let report = upgrade(node, TO, &kubelet, &state);
                assert_eq!(report["phase"], "done", "node {}: {report}", i + 1);
                wait_settled(node, &to_v, node.var("NODE"));
                "tool"
            }
            Turn::Control => {
                control_restarted = swapped_without_the_tool(
                    node,
                    &kubelet,
                    &before[i],
                    without.len(),
                    &to_v,
                    node.var("NODE"),
                );
                "control"
            }
        };
        let now = observe(node);
        let gone = match turn {
            Turn::Control => std::mem::take(&mut control_restarted),
            _ => restarted(&before[i], &now),
        };
        let cell = |set: &BTreeSet<String>| format!("{} of {}", set.len(), before[i].len());
        let (without_cell, with_cell) = match turn {
            Turn::Nothing => ("-".to_string(), "-".to_string()),
            Turn::Tool => ("-".to_string(), cell(&gone)),
            Turn::Control => {
                // a static pod with a derived UID: planned as a restart whenever the minor
                // changes; the real kubelet may derive the same UID and keep it (the safe
                // side, as in the suite's control). Everything else exactly.
                let derived = |k: &&String| k.contains("/fleet-static-");
                assert!(
                    gone.is_subset(without)
                        && gone.iter().filter(|k| !derived(k)).eq(without.iter().filter(|k| !derived(k))),
                    "node {}: without the tool the real kubelet {TO} restarts exactly what the plan said (plan: {without:?}, restarted: {gone:?})",
                    i + 1
                );
                (cell(&gone), "-".to_string())
            }
        };
        if turn == Turn::Control {
            // from here on the control node is judged from what it runs now
            before[i] = now;
        }
        // after each node's turn, every other node of the lab: no container restarted, none
        // in another process
        for (j, other) in nodes.iter().enumerate() {
            if turn == Turn::Control && j == i {
                continue;
            }
            let now = observe(other);
            let gone = restarted(&before[j], &now);
            assert!(
                gone.is_empty(),
                "node {}'s containers are kept through node {}'s turn ({observed}): restarted {gone:?}",
                j + 1,
                i + 1
            );
            for (k, b) in &before[j] {
                assert_eq!(
                    now[k].pid,
                    b.pid,
                    "{k} on node {} keeps its process through node {}'s turn ({observed})",
                    j + 1,
                    i + 1
                );
            }
        }
        rows.push(format!(
            "| {} | {} | {} → {TO} | {} | {} / {} | {without_cell} | {with_cell} |",
            node.var("NODE"),
            node.var("RUNTIME"),
            node.var("KUBELET_VERSION"),
            before[i].len(),
            without.len(),
            with.len(),
        ));
    }
    rows.push(format!(
        "\nThe lab of {} nodes up in {lab_up_s:.0} s; each node's plan (pods listed by kubectl, `plan -o json`) {plan_s:.1} s.",
        nodes.len()
    ));
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/real-kubelet");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("fleet.md"), rows.join("\n") + "\n").unwrap();
    eprintln!("{}", rows.join("\n"));
}

/// The full version of a kubelet `k8s-lab.sh build` made (its cache directory's name).
fn built_version(kubelet: &Path) -> String {
    kubelet
        .parent()
        .and_then(|d| d.file_name())
        .map(|d| d.to_string_lossy().into_owned())
        .unwrap()
}

/// A new kubelet that answers `--version` as the real one does and otherwise never becomes
/// healthy: it starts, serves nothing, and waits (a build that hangs at start).
fn never_healthy_kubelet(real: &Path, at: &Path) {
    std::fs::write(
        at,
        format!(
            "#!/bin/sh\ncase \" $* \" in *\" --version \"*) exec {} \"$@\" ;; esac\nexec sleep 3600\n",
            real.display()
        ),
    )
    .unwrap();
    let mut perm = std::fs::metadata(at).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(at, perm).unwrap();
}

/// deploy/ansible/ over three real kubelets of one lab (1.30 on containerd), one node at a
/// time with the role's gate (node Ready on the new kubelet, every container it ran still
/// running unrestarted), the second node given a new kubelet that never becomes healthy: the
/// first node goes through, the second is rolled back by `upgrade` itself (its old kubelet
/// binary, byte for byte, running again, every container kept), the play stops there and the
/// third node is never touched.
#[test]
fn the_ansible_rollout_stops_at_the_node_whose_new_kubelet_never_becomes_healthy() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the lab needs root (CI runs scripts/test.sh as root)"
    );
    let ansible =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/ansible/bin/ansible-playbook");
    assert!(
        ansible.exists(),
        "{} is missing: run scripts/setup-ansible.sh",
        ansible.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let lab = Lab::up_with(
        FROM,
        TO,
        "containerd",
        &[],
        &["--nodes".into(), "3".into()],
        &tmp.path().join("lab"),
    );
    let nodes: Vec<Lab> = (1..=3).map(|i| lab.node(i)).collect();
    for (i, node) in nodes.iter().enumerate() {
        lab.apply(&pinned_pod(&format!("rollout-{}", i + 1), node.var("NODE")));
    }
    for node in &nodes {
        wait_settled(node, node.var("KUBELET_VERSION"), node.var("NODE"));
    }
    let before: Vec<BTreeMap<String, Seen>> = nodes.iter().map(observe).collect();
    let old_kubelets: Vec<Vec<u8>> = nodes
        .iter()
        .map(|n| std::fs::read(n.var("KUBELET_PATH")).unwrap())
        .collect();
    let good = built_kubelet(TO);
    let to_v = built_version(&good);
    let broken = tmp.path().join("kubelet-never-healthy");
    never_healthy_kubelet(&good, &broken);

    let hosts: serde_json::Map<String, Value> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let own = Path::new(n.var("NODE_DIR")).join("rollout");
            let mut args = store_args(n);
            args.extend(
                [
                    "--kubeconfig".to_string(),
                    kubelet_kubeconfig(n).display().to_string(),
                    "--kubelet-dir".into(),
                    n.var("KUBELET_DIR").into(),
                    "--manifests".into(),
                    n.var("MANIFESTS").into(),
                    "--kubelet-pidfile".into(),
                    n.var("KUBELET_PIDFILE").into(),
                    "--kubelet-healthz".into(),
                    n.var("KUBELET_HEALTHZ").into(),
                ]
                .into_iter()
                .chain(
                    [
                        "stop-kubelet",
                        "start-kubelet",
                        "stop-runtime",
                        "start-runtime",
                    ]
                    .iter()
                    .flat_map(|v| [format!("--{v}"), n.lab(v)]),
                ),
            );
            (
                n.var("NODE").to_string(),
                serde_json::json!({
                    "kubelet_rehash_bin": own.join("bin/kubelet-rehash"),
                    "kubelet_rehash_dir": own.join("var"),
                    "kubelet_rehash_kubelet_src": if i == 1 { &broken } else { &good },
                    "kubelet_rehash_kubelet_path": n.var("KUBELET_PATH"),
                    "kubelet_rehash_args": args,
                }),
            )
        })
        .collect();
    let inventory = serde_json::json!({
        "kubelet_rehash_nodes": {
            "hosts": hosts,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
                "kubelet_rehash_become": false,
                "kubelet_rehash_from": FROM,
                "kubelet_rehash_to": TO,
                // the window's budget (default 300 s while the node is held Ready): a real
                // kubelet here is healthy within seconds, and the broken one is given up on
                // sooner
                "kubelet_rehash_budget": 60,
                "kubelet_rehash_binary_src": bin(),
                "kubelet_rehash_gate_kubeconfig": lab.var("KUBECONFIG"),
                "kubelet_rehash_gate_kubectl": lab.var("KUBECTL"),
            },
        },
    });
    // JSON is YAML: the yaml inventory plugin reads it
    let inv = tmp.path().join("inventory.yml");
    std::fs::write(&inv, serde_json::to_vec_pretty(&inventory).unwrap()).unwrap();
    let started = Instant::now();
    let out = Command::new(&ansible)
        .arg("-i")
        .arg(&inv)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/ansible/playbook.yml"))
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_FORCE_COLOR", "0")
        .env("ANSIBLE_LOCAL_TEMP", tmp.path().join("ansible-local"))
        .env("ANSIBLE_REMOTE_TMP", tmp.path().join("ansible-remote"))
        .env("ANSIBLE_CONFIG", tmp.path().join("no-ansible.cfg"))
        .output()
        .unwrap();
    let took = started.elapsed();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{log}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "ansible-playbook fails the rollout at the second node:\n{log}"
    );
    let recap = log.rsplit("PLAY RECAP").next().unwrap_or("");
    let recap_of = |host: &str| {
        recap
            .lines()
            .find(|l| l.split(':').next().map(str::trim) == Some(host))
            .map(str::to_string)
    };
    let name = |i: usize| nodes[i].var("NODE").to_string();
    let first =
        recap_of(&name(0)).unwrap_or_else(|| panic!("the play reached the first node:\n{log}"));
    assert!(
        first.contains("failed=0"),
        "the first node went through, gate and all: {first}"
    );
    assert!(
        log.contains(&format!(
            "{}: 1 container(s) kept, node Ready on True v{TO}.",
            name(0)
        )),
        "the gate passed the first node, Ready on kubelet {TO} with its container kept:\n{log}"
    );
    let second =
        recap_of(&name(1)).unwrap_or_else(|| panic!("the play reached the second node:\n{log}"));
    assert!(
        second.contains("failed=1"),
        "the second node failed: {second}"
    );
    assert!(
        log.contains("failed inside it and rolled back: the node runs its old kubelet")
            && log.contains("(exit 3)")
            && log.contains("rolled back: the runtime and the old kubelet run again"),
        "the play says the second node was rolled back (upgrade's exit 3):\n{log}"
    );
    assert!(
        recap_of(&name(2)).is_none(),
        "the play never reached the third node:\n{recap}"
    );

    // the real kubelets: the first on the new version, the second back on its old binary, the
    // third never stopped; every container of every node in its old process
    wait_settled(&nodes[0], &to_v, "the first node after the rollout");
    for i in [1, 2] {
        wait_settled(
            &nodes[i],
            nodes[i].var("KUBELET_VERSION"),
            "a node the rollout left on its old kubelet",
        );
        assert!(
            std::fs::read(nodes[i].var("KUBELET_PATH")).unwrap() == old_kubelets[i],
            "node {} runs its old kubelet binary, byte for byte",
            i + 1
        );
    }
    for (i, node) in nodes.iter().enumerate() {
        let now = observe(node);
        assert!(
            restarted(&before[i], &now).is_empty(),
            "no container of node {} restarted",
            i + 1
        );
        for (k, b) in &before[i] {
            assert_eq!(now[k].pid, b.pid, "{k} on node {} keeps its process", i + 1);
        }
    }
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/real-kubelet");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("fleet-rollout.md"),
        format!(
            "| node | new kubelet | play | kubelet after | containers kept |\n|---|---|---|---|---|\n\
             | {} | {TO} | ok, gate passed | {TO} | {} of {} |\n\
             | {} | never healthy | failed: rolled back (exit 3) | {FROM} (old binary) | {} of {} |\n\
             | {} | {TO} | never reached | {FROM} | {} of {} |\n\nansible-playbook took {:.0} s.\n",
            name(0), before[0].len(), before[0].len(),
            name(1), before[1].len(), before[1].len(),
            name(2), before[2].len(), before[2].len(),
            took.as_secs_f64()
        ),
    )
    .unwrap();
}
