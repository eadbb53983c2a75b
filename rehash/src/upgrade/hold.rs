//! Holding the node Ready while its kubelet is down (issue 37).
//!
//! Why: the node lifecycle controller marks a node `Unknown` once its heartbeat is older than
//! the grace period (40 s; 50 s from 1.32), taints it unreachable, takes its pods out of every
//! Service's endpoints and, 300 s later, evicts them. The heartbeat is the node's Lease in
//! `kube-node-lease` (the controller takes any renewal of it), or, on a cluster without node
//! leases, the Ready condition's `lastHeartbeatTime`; the Node authorizer lets the node's own
//! identity renew both. So while the kubelet is down, this module renews the heartbeat at the
//! kubelet's own interval, and the window may outlast the grace period.
//!
//! Why it never hides a broken node: it renews only while every container that ran before the
//! window is still the same process (pid and start time, checked before each renewal), only
//! for `max` from the kubelet's stop, and never after somebody else wrote the heartbeat (the
//! new kubelet: its own renewal ends the hold; anybody else: the hold stands aside). It stops
//! at once when any of these fails, when `upgrade` returns, and, being a thread of the
//! process, on a kill: the heartbeat then ages as it would have without the hold.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::state::{unix_ms, UpgradeState};

/// The default of `--hold-ready-max`: the controller's eviction tolerance (300 s), past
/// which even a held node's pods would be evicted had it gone NotReady at the kubelet's stop.
pub const DEFAULT_HOLD_MAX: Duration = Duration::from_secs(300);

/// What a write of the heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Beat {
    /// Written; the value written (the lease's `renewTime`, or the `lastHeartbeatTime`).
    Renewed(String),
    /// Somebody else wrote the heartbeat since this holder last did (or since it was first
    /// read); nothing was written. The text says who and what.
    WrittenByOther(String),
}

/// The hold's conditions, asked by a heartbeat before and during each request: how long the
/// request may still take, or why it must not be sent or go on.
pub type GoOn<'a> = &'a dyn Fn() -> Result<Duration, String>;

/// The node's heartbeat in the API server, renewed with the node's own identity.
pub trait NodeHeartbeat: Send + std::fmt::Debug {
    /// `lease` or `node-status`.
    fn mechanism(&self) -> &'static str;
    /// What is renewed, for the report: `lease kube-node-lease/NODE as system:node:NODE`.
    fn describe(&self) -> String;
    /// The kubelet's own renewal interval.
    fn interval(&self) -> Duration;
    /// Proves that a renewal is allowed, writing nothing (a dry run); run in the preflight.
    fn check(&mut self) -> Result<(), String>;
    /// Renews the heartbeat, unless somebody else wrote it since this holder's last write
    /// (before the first: since `check`). `go_on` is the hold's conditions: asked before
    /// every request (and every attempt of one) and while one runs, its `Err` means no
    /// request may be sent or go on (return at once), its `Ok` how long one may still take.
    fn beat(&mut self, go_on: GoOn<'_>) -> Result<Beat, String>;
    /// Whether somebody else wrote it since this holder's last write; writes nothing. `go_on`:
    /// as for `beat`.
    fn written_by_other(&mut self, go_on: GoOn<'_>) -> Result<Option<String>, String>;
}

/// What `upgrade` holds with, and for how long at most.
#[derive(Debug)]
pub struct HoldReady {
    /// The heartbeat to renew.
    pub heartbeat: Arc<Mutex<Box<dyn NodeHeartbeat>>>,
    /// `--hold-ready-max`: no renewal later than this after the kubelet's stop.
    pub max: Duration,
}

/// Why holding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldEnd {
    /// The kubelet that was started renewed the heartbeat itself: the hold's job is done.
    KubeletRenewed,
    /// Somebody else wrote the heartbeat while no kubelet of this run was started.
    OtherWriter,
    /// A container that ran before the window is gone or is another process.
    ContainersChanged,
    /// `--hold-ready-max` passed.
    MaxReached,
    /// `upgrade` returned before the kubelet renewed the heartbeat itself.
    RunEnded,
}

/// One renewal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RenewalRecord {
    /// When (Unix ms).
    pub unix_ms: u64,
    /// The value written, or why the write failed.
    pub wrote: Option<String>,
    /// Why it failed (the next tick tries again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The hold, as the state file and the report carry it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HoldLog {
    /// `lease` or `node-status`.
    pub mechanism: String,
    /// What was renewed, as whom.
    pub what: String,
    /// The renewal interval, seconds.
    pub interval_s: f64,
    /// `--hold-ready-max`, seconds.
    pub max_s: f64,
    /// When holding began (Unix ms): the kubelet's stop.
    pub started_unix_ms: u64,
    /// Containers whose processes were watched.
    pub watched_containers: usize,
    /// Every renewal, in order.
    pub renewals: Vec<RenewalRecord>,
    /// When a kubelet was started (from then on a foreign write is that kubelet's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_started_unix_ms: Option<u64>,
    /// Why holding ended.
    pub ended: Option<HoldEnd>,
    /// When (Unix ms).
    pub ended_unix_ms: Option<u64>,
    /// The particulars: which container, who wrote.
    pub ended_because: Option<String>,
}

/// The state file as both writers see it: the run's last state, and the hold's log written
/// into it. The lock keeps the two writers from interleaving; the holder writes the run's
/// latest state, so a renewal never writes an older step record back.
#[derive(Debug, Default)]
pub(crate) struct SharedState {
    last: Mutex<Option<(PathBuf, UpgradeState)>>,
}

impl SharedState {
    /// The run's write: its state with the hold's log as it is now.
    pub(crate) fn write(
        &self,
        path: &Path,
        state: &UpgradeState,
    ) -> Result<(), storepatch::StoreError> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let out = state.write(path);
        *last = Some((path.to_path_buf(), state.clone()));
        out
    }

    /// The holder's write: the run's last state with the new log.
    fn write_hold(&self, log: &HoldLog) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((path, state)) = last.as_mut() {
            state.hold_ready = Some(log.clone());
            state.updated_unix_ms = unix_ms();
            // a failed write is caught up by the run's next one, which records its errors
            let _ = state.write(path);
        }
    }
}

/// A process that must stay the same: its pid and its start time (`/proc/PID/stat` field 22),
/// so a pid reused by another process is not taken for the container.
#[derive(Debug, Clone)]
struct Watched {
    name: String,
    pid: u32,
    start: Option<u64>,
}

fn start_time(proc_dir: &Path, pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(proc_dir.join(pid.to_string()).join("stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // after the comm: state is field 3, starttime field 22
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

struct Shared {
    log: Mutex<HoldLog>,
    stop: AtomicBool,
    kubelet_started: AtomicBool,
    wake: Condvar,
    wake_lock: Mutex<()>,
}

/// A running hold: a thread renewing the heartbeat. Dropping it stops the renewals.
pub(crate) struct Holder {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Holder {
    /// Starts renewing now (the kubelet has just stopped): a first renewal at once, then one
    /// every interval.
    pub(crate) fn start(
        hold: &HoldReady,
        kept: &[(String, u32)],
        proc_dir: &Path,
        sink: Arc<SharedState>,
    ) -> Holder {
        let (mechanism, what, interval) = {
            let hb = hold.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
            (hb.mechanism(), hb.describe(), hb.interval())
        };
        let watched: Vec<Watched> = kept
            .iter()
            .map(|(name, pid)| Watched {
                name: name.clone(),
                pid: *pid,
                start: start_time(proc_dir, *pid),
            })
            .collect();
        let shared = Arc::new(Shared {
            log: Mutex::new(HoldLog {
                mechanism: mechanism.to_string(),
                what,
                interval_s: interval.as_secs_f64(),
                max_s: hold.max.as_secs_f64(),
                started_unix_ms: unix_ms(),
                watched_containers: watched.len(),
                renewals: Vec::new(),
                kubelet_started_unix_ms: None,
                ended: None,
                ended_unix_ms: None,
                ended_because: None,
            }),
            stop: AtomicBool::new(false),
            kubelet_started: AtomicBool::new(false),
            wake: Condvar::new(),
            wake_lock: Mutex::new(()),
        });
        let proc_dir = proc_dir.to_path_buf();
        let sh = shared.clone();
        let heartbeat = hold.heartbeat.clone();
        let max = hold.max;
        let thread = std::thread::Builder::new()
            .name("hold-ready".into())
            .spawn(move || hold_loop(&heartbeat, max, &sh, &watched, &proc_dir, interval, &sink))
            .expect("a thread starts");
        Holder {
            shared,
            thread: Some(thread),
        }
    }

    /// A kubelet was started: its own write of the heartbeat ends the hold from now on.
    pub(crate) fn kubelet_started(&self) {
        self.shared.kubelet_started.store(true, Ordering::SeqCst);
        let mut log = self.shared.log.lock().unwrap_or_else(|p| p.into_inner());
        log.kubelet_started_unix_ms.get_or_insert_with(unix_ms);
        drop(log);
        self.nudge();
    }

    fn nudge(&self) {
        let _g = self
            .shared
            .wake_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.shared.wake.notify_all();
    }

    /// The log as it is now.
    pub(crate) fn log(&self) -> HoldLog {
        self.shared
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `wait` for the started kubelet's own renewal, checking every 200 ms (the
    /// hold goes on renewing meanwhile), then stops the hold.
    pub(crate) fn finish(mut self, wait: Duration) -> HoldLog {
        let deadline = Instant::now() + wait;
        while self.log().ended.is_none() && Instant::now() < deadline {
            self.nudge();
            std::thread::sleep(Duration::from_millis(200));
        }
        self.stop();
        self.log()
    }

    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.nudge();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut log = self.shared.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.ended.is_none() {
            log.ended = Some(HoldEnd::RunEnded);
            log.ended_unix_ms = Some(unix_ms());
            log.ended_because = Some(
                "upgrade returned before the kubelet renewed the heartbeat itself: the heartbeat now ages as it would have without the hold"
                    .into(),
            );
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stop();
    }
}

fn end(shared: &Shared, sink: &SharedState, how: HoldEnd, why: String) {
    let mut log = shared.log.lock().unwrap_or_else(|p| p.into_inner());
    if log.ended.is_none() {
        log.ended = Some(how);
        log.ended_unix_ms = Some(unix_ms());
        log.ended_because = Some(why);
        sink.write_hold(&log);
    }
}

fn hold_loop(
    heartbeat: &Mutex<Box<dyn NodeHeartbeat>>,
    max: Duration,
    shared: &Shared,
    watched: &[Watched],
    proc_dir: &Path,
    interval: Duration,
    sink: &SharedState,
) {
    let began = Instant::now();
    // Why holding must end now, if it must: asked before each renewal, and by the heartbeat
    // before every attempt and while one runs, so that no renewal is sent, retried or left
    // running once the conditions no longer stand (a renewal in flight when a container dies
    // would otherwise land after it); `Ok`: what is left of `max`.
    let must_end = || -> Option<(HoldEnd, String)> {
        if shared.stop.load(Ordering::SeqCst) {
            return Some((HoldEnd::RunEnded, "upgrade returned".into()));
        }
        if began.elapsed() > max {
            return Some((
                HoldEnd::MaxReached,
                format!(
                    "--hold-ready-max ({:.0} s) passed: not renewing any more",
                    max.as_secs_f64()
                ),
            ));
        }
        watched
            .iter()
            .find(|w| w.start.is_none() || start_time(proc_dir, w.pid) != w.start)
            .map(|w| {
                (
                    HoldEnd::ContainersChanged,
                    format!(
                        "container {} (pid {}) is no longer the process it was before the window: not renewing, so the node goes NotReady as it should",
                        w.name, w.pid
                    ),
                )
            })
    };
    let go_on = || match must_end() {
        Some((_, why)) => Err(why),
        None => Ok(max.saturating_sub(began.elapsed())),
    };
    // the first renewal at once: the grace period then counts from the kubelet's stop at the
    // earliest, not from its last renewal
    let mut next = Instant::now();
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let started = shared.kubelet_started.load(Ordering::SeqCst);
        let now = Instant::now();
        // between renewals, once a kubelet was started: is the heartbeat its own yet?
        if started {
            let other = {
                let mut hb = heartbeat.lock().unwrap_or_else(|p| p.into_inner());
                hb.written_by_other(&go_on)
            };
            if let Ok(Some(who)) = other {
                return foreign(shared, sink, started, who);
            }
        }
        if now >= next {
            match must_end() {
                Some((HoldEnd::RunEnded, _)) => return,
                Some((how, why)) => return end(shared, sink, how, why),
                None => {}
            }
            let beat = {
                let mut hb = heartbeat.lock().unwrap_or_else(|p| p.into_inner());
                hb.beat(&go_on)
            };
            let rec = match beat {
                Ok(Beat::Renewed(v)) => RenewalRecord {
                    unix_ms: unix_ms(),
                    wrote: Some(v),
                    error: None,
                },
                Ok(Beat::WrittenByOther(who)) => {
                    return foreign(
                        shared,
                        sink,
                        shared.kubelet_started.load(Ordering::SeqCst),
                        who,
                    )
                }
                // stopped by the conditions, not a failure of the server: the next turn
                // ends the hold with their reason
                Err(_) if must_end().is_some() => continue,
                Err(e) => RenewalRecord {
                    unix_ms: unix_ms(),
                    wrote: None,
                    error: Some(e),
                },
            };
            let failed = rec.error.is_some();
            {
                let mut log = shared.log.lock().unwrap_or_else(|p| p.into_inner());
                log.renewals.push(rec);
                sink.write_hold(&log);
            }
            // a failed renewal is tried again soon: the lease has a grace period to spare
            next = Instant::now()
                + if failed {
                    interval.min(Duration::from_secs(2))
                } else {
                    interval
                };
        }
        // wake at the next renewal, or in 500 ms once a kubelet runs (to see its own renewal)
        let wait = if shared.kubelet_started.load(Ordering::SeqCst) {
            Duration::from_millis(500).min(next.saturating_duration_since(Instant::now()))
        } else {
            next.saturating_duration_since(Instant::now())
        };
        let g = shared.wake_lock.lock().unwrap_or_else(|p| p.into_inner());
        if !shared.stop.load(Ordering::SeqCst) {
            let _ = shared
                .wake
                .wait_timeout(g, wait.max(Duration::from_millis(10)));
        }
    }
}

fn foreign(shared: &Shared, sink: &SharedState, kubelet_started: bool, who: String) {
    if kubelet_started {
        end(
            shared,
            sink,
            HoldEnd::KubeletRenewed,
            format!("the kubelet renewed the heartbeat itself ({who})"),
        )
    } else {
        end(
            shared,
            sink,
            HoldEnd::OtherWriter,
            format!("somebody else wrote the heartbeat while no kubelet of this run had started ({who}): standing aside"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API server's heartbeat as a version counter: the lifecycle controller's view of it
    /// is tested on the real control plane (cli/tests/real_kubelet_hold.rs); here, the
    /// holder's own rules.
    #[derive(Debug, Default)]
    struct Server {
        version: u64,
        ours: u64,
        beats: usize,
    }

    #[derive(Debug)]
    struct Model(Arc<Mutex<Server>>);

    impl NodeHeartbeat for Model {
        fn mechanism(&self) -> &'static str {
            "lease"
        }
        fn describe(&self) -> String {
            "a model lease".into()
        }
        fn interval(&self) -> Duration {
            Duration::from_millis(40)
        }
        fn check(&mut self) -> Result<(), String> {
            Ok(())
        }
        fn beat(&mut self, go_on: GoOn<'_>) -> Result<Beat, String> {
            go_on()?;
            let mut s = self.0.lock().unwrap();
            if s.beats > 0 && s.version != s.ours {
                return Ok(Beat::WrittenByOther(format!("version {}", s.version)));
            }
            s.version += 1;
            s.ours = s.version;
            s.beats += 1;
            Ok(Beat::Renewed(s.version.to_string()))
        }
        fn written_by_other(&mut self, go_on: GoOn<'_>) -> Result<Option<String>, String> {
            go_on()?;
            let s = self.0.lock().unwrap();
            Ok((s.beats > 0 && s.version != s.ours).then(|| format!("version {}", s.version)))
        }
    }

    fn model_hold(max: Duration) -> (HoldReady, Arc<Mutex<Server>>) {
        let server = Arc::new(Mutex::new(Server::default()));
        (
            HoldReady {
                heartbeat: Arc::new(Mutex::new(Box::new(Model(server.clone())))),
                max,
            },
            server,
        )
    }

    fn wait_for(h: &Holder, what: &str) -> HoldLog {
        let t0 = Instant::now();
        loop {
            let log = h.log();
            if log.ended.is_some() {
                return log;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{what}: the hold ended in 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap()
    }

    #[test]
    fn the_hold_renews_at_its_interval_and_ends_at_the_started_kubelets_own_renewal() {
        let (hold, server) = model_hold(Duration::from_secs(60));
        let mut c = sleeper();
        let t0 = Instant::now();
        let h = Holder::start(
            &hold,
            &[("c".into(), c.id())],
            Path::new("/proc"),
            Default::default(),
        );
        // at once (as soon as the holder's thread runs: a loaded machine may take a while)
        while server.lock().unwrap().beats == 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no first renewal");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        let beats = server.lock().unwrap().beats;
        let took = t0.elapsed();
        // then never faster than the interval (a loaded machine may give fewer)
        assert!(
            beats as u128 <= 2 + took.as_millis() / 40,
            "one renewal at once, then at most one per 40 ms interval: {beats} in {took:?}"
        );
        // a write of somebody else before any kubelet started is not the kubelet's
        h.kubelet_started();
        server.lock().unwrap().version += 1; // the kubelet's own renewal
        let log = wait_for(&h, "kubelet renewal");
        assert_eq!(log.ended, Some(HoldEnd::KubeletRenewed), "{log:?}");
        let after = server.lock().unwrap().beats;
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            server.lock().unwrap().beats,
            after,
            "no renewal after the kubelet's own"
        );
        assert!(log.renewals.len() >= beats && log.kubelet_started_unix_ms.is_some());
        let _ = c.kill();
        let _ = c.wait();
    }

    #[test]
    fn a_foreign_write_before_the_kubelet_starts_makes_the_hold_stand_aside() {
        let (hold, server) = model_hold(Duration::from_secs(60));
        let h = Holder::start(&hold, &[], Path::new("/proc"), Default::default());
        std::thread::sleep(Duration::from_millis(60));
        server.lock().unwrap().version += 1;
        let log = wait_for(&h, "foreign write");
        assert_eq!(log.ended, Some(HoldEnd::OtherWriter), "{log:?}");
    }

    #[test]
    fn a_container_that_died_stops_the_renewals_at_once() {
        let (hold, server) = model_hold(Duration::from_secs(60));
        let mut c = sleeper();
        let h = Holder::start(
            &hold,
            &[("web/app".into(), c.id())],
            Path::new("/proc"),
            Default::default(),
        );
        std::thread::sleep(Duration::from_millis(100));
        c.kill().unwrap();
        c.wait().unwrap();
        let log = wait_for(&h, "a dead container");
        assert_eq!(log.ended, Some(HoldEnd::ContainersChanged), "{log:?}");
        assert!(
            log.ended_because.as_deref().unwrap().contains("web/app"),
            "names the container: {log:?}"
        );
        let beats = server.lock().unwrap().beats;
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            server.lock().unwrap().beats,
            beats,
            "no renewal after the container died"
        );
    }

    #[test]
    fn the_hold_ends_at_its_maximum_and_when_dropped() {
        let (hold, server) = model_hold(Duration::from_millis(150));
        let h = Holder::start(&hold, &[], Path::new("/proc"), Default::default());
        let log = wait_for(&h, "max");
        assert_eq!(log.ended, Some(HoldEnd::MaxReached), "{log:?}");
        let beats = server.lock().unwrap().beats;
        assert!(
            (1..=6).contains(&beats),
            "renewed only within the maximum: {beats}"
        );

        let (hold, server) = model_hold(Duration::from_secs(60));
        let h = Holder::start(&hold, &[], Path::new("/proc"), Default::default());
        std::thread::sleep(Duration::from_millis(100));
        let log = h.finish(Duration::ZERO);
        assert_eq!(log.ended, Some(HoldEnd::RunEnded), "{log:?}");
        let beats = server.lock().unwrap().beats;
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            server.lock().unwrap().beats,
            beats,
            "no renewal once the run ended"
        );
    }

    /// A server that never answers a renewal: the request goes on until `go_on` says no.
    #[derive(Debug, Default)]
    struct Stuck {
        /// Requests sent (and left hanging).
        sent: usize,
        /// Requests that returned (only ever because `go_on` said no).
        returned: usize,
        /// The longest time `go_on` allowed.
        longest_allowed: Duration,
    }

    #[derive(Debug)]
    struct StuckModel(Arc<Mutex<Stuck>>);

    impl StuckModel {
        fn wait(&self, go_on: GoOn<'_>) -> String {
            self.0.lock().unwrap().sent += 1;
            loop {
                match go_on() {
                    Ok(left) => {
                        let mut s = self.0.lock().unwrap();
                        s.longest_allowed = s.longest_allowed.max(left);
                    }
                    Err(why) => {
                        self.0.lock().unwrap().returned += 1;
                        return why;
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    impl NodeHeartbeat for StuckModel {
        fn mechanism(&self) -> &'static str {
            "lease"
        }
        fn describe(&self) -> String {
            "a lease whose server never answers".into()
        }
        fn interval(&self) -> Duration {
            Duration::from_millis(40)
        }
        fn check(&mut self) -> Result<(), String> {
            Ok(())
        }
        fn beat(&mut self, go_on: GoOn<'_>) -> Result<Beat, String> {
            Err(self.wait(go_on))
        }
        fn written_by_other(&mut self, go_on: GoOn<'_>) -> Result<Option<String>, String> {
            Err(self.wait(go_on))
        }
    }

    fn stuck_hold(max: Duration) -> (HoldReady, Arc<Mutex<Stuck>>) {
        let server = Arc::new(Mutex::new(Stuck::default()));
        (
            HoldReady {
                heartbeat: Arc::new(Mutex::new(Box::new(StuckModel(server.clone())))),
                max,
            },
            server,
        )
    }

    /// Waits until the holder's thread has a renewal in flight: on a loaded machine it may
    /// not have been scheduled yet after any fixed sleep, and then the run's end or a dead
    /// container would be met before any renewal, which is not what these tests are about.
    fn until_in_flight(server: &Arc<Mutex<Stuck>>) {
        let t0 = Instant::now();
        while server.lock().unwrap().sent == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the hold sent its first renewal in 10 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// How soon a renewal in flight must give up once the hold's conditions no longer stand:
    /// the heartbeat asks them every few ms, so this is "at once" next to the 60 s maximum it
    /// would otherwise run to, with room for a loaded machine (the CI runs these tests beside
    /// niced Kubernetes builds on 2 cores) that schedules the holder's thread late.
    const AT_ONCE: Duration = Duration::from_secs(5);

    #[test]
    fn a_renewal_never_answered_does_not_hold_the_run_up() {
        let (hold, server) = stuck_hold(Duration::from_secs(60));
        let h = Holder::start(&hold, &[], Path::new("/proc"), Default::default());
        until_in_flight(&server);
        let t0 = Instant::now();
        let log = h.finish(Duration::ZERO);
        assert!(
            t0.elapsed() < AT_ONCE,
            "the run's end stops a renewal in flight at once: {:?}",
            t0.elapsed()
        );
        assert_eq!(log.ended, Some(HoldEnd::RunEnded), "{log:?}");
        assert_eq!(
            server.lock().unwrap().returned,
            1,
            "the stuck renewal returned"
        );
        assert!(
            log.renewals.is_empty(),
            "a renewal stopped by the run's end is not recorded as a failure: {log:?}"
        );
    }

    #[test]
    fn a_renewal_in_flight_when_a_container_dies_is_abandoned() {
        let (hold, server) = stuck_hold(Duration::from_secs(60));
        let mut c = sleeper();
        let h = Holder::start(
            &hold,
            &[("web/app".into(), c.id())],
            Path::new("/proc"),
            Default::default(),
        );
        until_in_flight(&server);
        c.kill().unwrap();
        c.wait().unwrap();
        let t0 = Instant::now();
        let log = wait_for(&h, "a container died during a renewal");
        assert!(
            t0.elapsed() < AT_ONCE,
            "the renewal in flight is abandoned as soon as the container is gone: {:?}",
            t0.elapsed()
        );
        assert_eq!(log.ended, Some(HoldEnd::ContainersChanged), "{log:?}");
        let server = server.lock().unwrap();
        assert_eq!(
            (server.sent, server.returned),
            (1, 1),
            "the renewal in flight returned, and none was sent after"
        );
    }

    #[test]
    fn a_renewal_in_flight_is_bounded_by_what_is_left_of_the_maximum() {
        let max = Duration::from_millis(300);
        let (hold, server) = stuck_hold(max);
        let h = Holder::start(&hold, &[], Path::new("/proc"), Default::default());
        let t0 = Instant::now();
        let log = wait_for(&h, "max during a renewal");
        assert_eq!(log.ended, Some(HoldEnd::MaxReached), "{log:?}");
        assert!(
            t0.elapsed() < max + AT_ONCE,
            "no renewal runs past --hold-ready-max: {:?}",
            t0.elapsed()
        );
        assert!(
            server.lock().unwrap().longest_allowed <= max,
            "each attempt is allowed at most what is left of the maximum"
        );
    }

    #[test]
    fn start_time_reads_this_process_and_refuses_a_missing_one() {
        let me = std::process::id();
        let t = start_time(Path::new("/proc"), me);
        assert!(t.is_some(), "this process has a start time");
        assert_eq!(t, start_time(Path::new("/proc"), me), "and it is stable");
        assert_eq!(start_time(Path::new("/proc"), u32::MAX - 1), None);
    }
}
