//! Watches of the control plane beside the sampler's polls (issue 55): a poll every 100 ms is
//! two TLS requests a tick with no bound on the gap between them, so a blip shorter than a gap
//! could hide between two samples. A watch is told every change the API server makes: each
//! object is listed once (its state at the window's start and the list's resourceVersion) and
//! then watched from that resourceVersion, so no change between the list and the watch is lost
//! and no partial initial state is ever counted.

use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// curl with the lab's admin certificate, for `server` (one process per request, independent
/// of kubectl's cache).
#[derive(Clone)]
pub struct AdminCurl {
    pub pki: PathBuf,
    pub server: String,
}

impl AdminCurl {
    /// The lab's admin client: its `pki/` and the server its kubeconfig names.
    pub fn of(lab_dir: &Path, kubeconfig: &Path) -> AdminCurl {
        let text = std::fs::read_to_string(kubeconfig).unwrap();
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .unwrap_or_else(|| panic!("{} names its server", kubeconfig.display()))
            .to_string();
        AdminCurl {
            pki: lab_dir.join("pki"),
            server,
        }
    }

    /// `curl` for `path` (the caller adds its own flags before running it).
    pub fn command(&self, path: &str) -> Command {
        let mut c = Command::new("curl");
        c.args(["-sf", "--cacert"])
            .arg(self.pki.join("ca.crt"))
            .arg("--cert")
            .arg(self.pki.join("admin.crt"))
            .arg("--key")
            .arg(self.pki.join("admin.key"))
            .arg(format!("{}{path}", self.server));
        c
    }

    /// One GET, `None` when it failed or answered no JSON (2 s at most).
    pub fn get(&self, path: &str) -> Option<Value> {
        let o = self.command(path).args(["--max-time", "2"]).output().ok()?;
        serde_json::from_slice(&o.stdout).ok()
    }
}

/// One change the API server reported: `ADDED`, `MODIFIED`, `DELETED` (or `LISTED` for the
/// objects of the first list), with when it arrived.
#[derive(Debug, Clone)]
pub struct Event {
    /// Seconds since the sampler started.
    pub t: f64,
    pub unix_ms: u64,
    pub kind: String,
    pub object: Value,
}

/// A list, then a watch of `collection` (an API path of a collection; `selector` its query),
/// collecting every event until [`Watch::finish`].
pub struct Watch {
    what: String,
    child: Option<Child>,
    thread: Option<std::thread::JoinHandle<()>>,
    events: Arc<Mutex<Vec<Event>>>,
    /// Whether the list answered (a watch that never started is a failure of the window).
    pub listed: bool,
}

impl Watch {
    pub fn start(curl: &AdminCurl, collection: &str, selector: &str, t0: Instant) -> Watch {
        let events = Arc::new(Mutex::new(Vec::new()));
        let what = format!("{collection}?{selector}");
        let Some(list) = curl.get(&format!("{collection}?{selector}")) else {
            return Watch {
                what,
                child: None,
                thread: None,
                events,
                listed: false,
            };
        };
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("")
            .to_string();
        for o in list["items"].as_array().into_iter().flatten() {
            events.lock().unwrap().push(Event {
                t: t0.elapsed().as_secs_f64(),
                unix_ms: super::unix_ms(),
                kind: "LISTED".into(),
                object: o.clone(),
            });
        }
        let mut child = curl
            .command(&format!(
                "{collection}?{selector}&watch=true&resourceVersion={rv}"
            ))
            .arg("-N")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let ev = events.clone();
        let thread = std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                ev.lock().unwrap().push(Event {
                    t: t0.elapsed().as_secs_f64(),
                    unix_ms: super::unix_ms(),
                    kind: v["type"].as_str().unwrap_or("").to_string(),
                    object: v["object"].clone(),
                });
            }
        });
        Watch {
            what,
            child: Some(child),
            thread: Some(thread),
            events,
            listed: true,
        }
    }

    /// Stops the watch; every event seen, in order. A watch the API server ended early (its
    /// `curl` exited before the window's end) is a failure: the window was not watched to
    /// its end.
    pub fn finish(mut self) -> Result<Vec<Event>, String> {
        let mut ended_early = false;
        if let Some(mut c) = self.child.take() {
            ended_early = c.try_wait().ok().flatten().is_some();
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let ev = std::mem::take(&mut *self.events.lock().unwrap());
        if !self.listed {
            return Err(format!("the list of {} failed", self.what));
        }
        if ended_early {
            return Err(format!(
                "the watch of {} ended before the window did",
                self.what
            ));
        }
        if let Some(e) = ev.iter().find(|e| e.kind == "ERROR") {
            return Err(format!("the watch of {} failed: {}", self.what, e.object));
        }
        Ok(ev)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The node's Ready condition and taints after each event: (t, unix ms, status, reason,
/// unreachable taint).
pub fn node_timeline(events: &[Event]) -> Vec<(f64, u64, String, String, bool)> {
    events
        .iter()
        .filter(|e| e.kind != "DELETED")
        .map(|e| {
            let (status, reason) = ready_of(&e.object);
            (e.t, e.unix_ms, status, reason, unreachable_of(&e.object))
        })
        .collect()
}

/// A Node's Ready condition: (status, reason); ("absent", "") when it has none.
pub fn ready_of(node: &Value) -> (String, String) {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .unwrap_or_else(|| ("absent".into(), String::new()))
}

/// Whether the node lifecycle controller tainted a Node unreachable.
pub fn unreachable_of(node: &Value) -> bool {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["key"] == "node.kubernetes.io/unreachable")
}

/// The Service's ready endpoints after each event, summed over its EndpointSlices (or its one
/// Endpoints object before 1.21): (t, ready endpoints).
pub fn endpoints_timeline(events: &[Event], slices: bool) -> Vec<(f64, usize)> {
    let mut by_name: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = Vec::new();
    let listed = events.iter().filter(|e| e.kind == "LISTED").count();
    for (i, e) in events.iter().enumerate() {
        let name = e.object["metadata"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if e.kind == "DELETED" {
            by_name.remove(&name);
        } else {
            by_name.insert(name, ready_endpoints(&e.object, slices));
        }
        // the first list counts once it is whole
        if i + 1 >= listed {
            out.push((e.t, by_name.values().sum()));
        }
    }
    out
}

/// Ready endpoints of one EndpointSlice (`conditions.ready`) or Endpoints object
/// (`subsets[].addresses`: the ready ones).
pub fn ready_endpoints(o: &Value, slice: bool) -> usize {
    if slice {
        o["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["conditions"]["ready"] == true)
            .count()
    } else {
        o["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["addresses"].as_array().cloned().unwrap_or_default())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(t: f64, kind: &str, object: Value) -> Event {
        Event {
            t,
            unix_ms: (t * 1000.0) as u64,
            kind: kind.into(),
            object,
        }
    }

    fn slice(name: &str, ready: &[bool]) -> Value {
        json!({"metadata": {"name": name}, "endpoints": ready.iter().map(|r| json!({"conditions": {"ready": r}})).collect::<Vec<_>>()})
    }

    #[test]
    fn endpoints_are_counted_once_the_first_list_is_whole() {
        // two slices listed: the first alone (2 ready) is no state the Service was in
        let ev = [
            event(0.0, "LISTED", slice("a", &[true, true])),
            event(0.0, "LISTED", slice("b", &[true])),
            event(1.0, "MODIFIED", slice("a", &[true, false])),
            event(2.0, "DELETED", slice("b", &[])),
        ];
        let t: Vec<usize> = endpoints_timeline(&ev, true).iter().map(|e| e.1).collect();
        assert_eq!(
            t,
            [3, 2, 1],
            "the totals after the whole list and after each change"
        );
    }

    #[test]
    fn endpoints_objects_count_their_ready_addresses() {
        let o = json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{}, {}], "notReadyAddresses": [{}]}]});
        assert_eq!(
            ready_endpoints(&o, false),
            2,
            "notReadyAddresses are not ready"
        );
    }

    #[test]
    fn the_node_timeline_reads_ready_and_the_unreachable_taint() {
        let node = |status: &str, taint: bool| {
            json!({"status": {"conditions": [{"type": "Ready", "status": status, "reason": "R"}]},
                   "spec": {"taints": if taint { json!([{"key": "node.kubernetes.io/unreachable"}]) } else { json!([]) }}})
        };
        let ev = [
            event(0.0, "LISTED", node("True", false)),
            event(3.0, "MODIFIED", node("Unknown", true)),
        ];
        let t = node_timeline(&ev);
        assert_eq!(
            t.iter().map(|n| (n.2.as_str(), n.4)).collect::<Vec<_>>(),
            [("True", false), ("Unknown", true)],
            "each event's Ready status and taint"
        );
    }
}
