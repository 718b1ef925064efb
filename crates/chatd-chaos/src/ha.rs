//! The HA mode (`--ha`, issue 36): the database is a real HA PostgreSQL
//! cluster started by `scripts/ha-cluster.sh` (etcd, three Patroni-managed
//! PostgreSQL nodes with synchronous replication, HAProxy routing to the
//! primary), and the database faults are the cluster's own: `kill -9` of
//! the primary, a stall of the primary (SIGSTOP past Patroni's TTL, then
//! SIGCONT) and a planned switchover.
//!
//! [`HaCluster`] drives the script; [`run_faults`] is the database fault
//! loop of an HA run, beside the replica faults of `main.rs`; [`figures`]
//! turns its record and the clients' ledger into the per-fault figures the
//! run prints (time to the first acknowledged write, longest time without
//! one, `503`s and transport errors during the fault).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng as _};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::Command;

use crate::client::{Ledger, Stats};
use crate::watch::View;

/// The port base of the harness's HA cluster when `CHATD_HA_PORT_BASE` is
/// not set (the script's own default, 5540, is left to users and other
/// tests).
pub const DEFAULT_PORT_BASE: u16 = 5600;

/// Finds `scripts/ha-cluster.sh`: under the current directory, under an
/// ancestor of this executable's directory (`target/debug/..`), or under
/// the repository this crate was built from.
///
/// # Errors
/// When none of those holds it (give `--ha-script`).
pub fn find_script() -> anyhow::Result<PathBuf> {
    let relative = Path::new("scripts/ha-cluster.sh");
    let mut candidates = vec![std::env::current_dir()?.join(relative)];
    if let Ok(exe) = std::env::current_exe() {
        candidates.extend(exe.ancestors().skip(1).map(|dir| dir.join(relative)));
    }
    candidates.push(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(relative),
    );
    candidates
        .into_iter()
        .find(|path| path.is_file())
        .context("scripts/ha-cluster.sh not found next to the repository (give --ha-script PATH)")
}

/// A running HA cluster in its own directory, driven through the script.
///
/// Dropping it without [`HaCluster::stop`] (an error, an interrupt) stops
/// the cluster and keeps its directory, printing where.
pub struct HaCluster {
    script: PathBuf,
    dir: PathBuf,
    port_base: u16,
    /// The script's output, appended command by command.
    log: PathBuf,
    /// `CHATD_HA_URL`: the maintenance database through HAProxy's
    /// read-write port.
    admin_url: String,
    stopped: AtomicBool,
    /// Write lock of `log`.
    log_lock: Mutex<()>,
}

impl HaCluster {
    /// Starts the cluster with `script start DIR`, DIR a new directory
    /// under /tmp, on ports from `port_base` (`CHATD_HA_PORT_BASE`), the
    /// script's output appended to `log`. Waits as long as the script does
    /// (up to 90 s, plus package installation on a machine without them).
    ///
    /// # Errors
    /// When the script fails or prints no `CHATD_HA_URL=` line; the
    /// cluster is stopped then and its directory kept.
    pub async fn start(script: PathBuf, port_base: u16, log: PathBuf) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("chatd-chaos-ha-")
            .tempdir_in("/tmp")?
            .keep();
        let mut cluster = Self {
            script,
            dir,
            port_base,
            log,
            admin_url: String::new(),
            stopped: AtomicBool::new(false),
            log_lock: Mutex::new(()),
        };
        let out = cluster
            .run(&["start"], Duration::from_secs(600))
            .await
            .context("scripts/ha-cluster.sh start")?;
        cluster.admin_url = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("CHATD_HA_URL="))
            .context("scripts/ha-cluster.sh start printed no CHATD_HA_URL= line")?
            .to_owned();
        Ok(cluster)
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `CHATD_HA_URL`, the maintenance database `postgres` through HAProxy.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// The URL of database `chatd` through HAProxy.
    pub fn url(&self) -> String {
        match self.admin_url.rsplit_once('/') {
            Some((base, _)) => format!("{base}/chatd"),
            None => format!("{}/chatd", self.admin_url),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.script);
        command
            .arg(args[0])
            .arg(&self.dir)
            .args(&args[1..])
            .env("CHATD_HA_PORT_BASE", self.port_base.to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    fn append_log(&self, text: &str) {
        use std::io::Write as _;
        let _guard = self.log_lock.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            let _ = file.write_all(text.as_bytes());
        }
    }

    /// Runs `script args[0] DIR args[1..]` and returns its stdout.
    ///
    /// # Errors
    /// A non-zero exit (with the end of its stderr), or no exit within
    /// `timeout` (the script is killed).
    async fn run(&self, args: &[&str], timeout: Duration) -> anyhow::Result<String> {
        let output = tokio::time::timeout(timeout, self.command(args).output())
            .await
            .map_err(|_| anyhow::anyhow!("ha-cluster.sh {} timed out after {timeout:?}", args[0]))?
            .context("running scripts/ha-cluster.sh")?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        self.append_log(&format!(
            "$ ha-cluster.sh {} ({})\n{stdout}{stderr}",
            args.join(" "),
            output.status
        ));
        if !output.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            bail!(
                "ha-cluster.sh {} exited with {}: {}",
                args.join(" "),
                output.status,
                tail.join("\n")
            );
        }
        Ok(stdout)
    }

    /// The last non-empty line of a command's output (a node name).
    fn last_line(out: &str) -> anyhow::Result<String> {
        out.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_owned)
            .context("no node name printed")
    }

    /// The leader's node name.
    ///
    /// # Errors
    /// None (the script exits 1), or no answer within 5 s.
    pub async fn primary(&self) -> anyhow::Result<String> {
        Self::last_line(&self.run(&["primary"], Duration::from_secs(5)).await?)
    }

    /// SIGKILLs the leader's Patroni and postmaster; returns its name.
    ///
    /// # Errors
    /// The script's.
    pub async fn kill_primary(&self) -> anyhow::Result<String> {
        Self::last_line(&self.run(&["kill-primary"], Duration::from_secs(30)).await?)
    }

    /// Starts `node`'s Patroni again after [`HaCluster::kill_primary`].
    ///
    /// # Errors
    /// The script's.
    pub async fn restart_node(&self, node: &str) -> anyhow::Result<()> {
        self.run(&["restart-node", node], Duration::from_secs(60))
            .await
            .map(drop)
    }

    /// A planned switchover to the sync standby; returns the new leader's
    /// name once it answers `/primary`.
    ///
    /// # Errors
    /// The script's.
    pub async fn switchover(&self) -> anyhow::Result<String> {
        Self::last_line(&self.run(&["switchover"], Duration::from_secs(120)).await?)
    }

    /// Waits until the cluster is healthy again (one primary, two
    /// streaming replicas, one of them the sync standby, a write works),
    /// at most `secs` seconds.
    ///
    /// # Errors
    /// Not healthy in time.
    pub async fn wait_healthy(&self, secs: u64) -> anyhow::Result<()> {
        self.run(
            &["wait-healthy", &secs.to_string()],
            Duration::from_secs(secs + 30),
        )
        .await
        .map(drop)
    }

    /// Stalls the leader for `secs` seconds (`stall-primary DIR SECS`, in
    /// the background): returns the stalled node's name once the script
    /// printed it (its processes are stopped then) and the task that ends
    /// when the script does (after SIGCONT), with the script's result.
    ///
    /// # Errors
    /// The script ends without printing a name.
    pub async fn stall_primary(
        &self,
        secs: u64,
    ) -> anyhow::Result<(String, tokio::task::JoinHandle<anyhow::Result<()>>)> {
        let mut command = self.command(&["stall-primary", &secs.to_string()]);
        // Not killed when the handle drops: the SIGCONT must come.
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(false);
        let mut child = command.spawn().context("spawning stall-primary")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut stderr = child.stderr.take().context("stderr")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = String::new();
        let node = loop {
            match tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await {
                Ok(Ok(Some(line))) => {
                    seen.push_str(&line);
                    seen.push('\n');
                    if !line.trim().is_empty() {
                        break line.trim().to_owned();
                    }
                }
                _ => {
                    let mut err = String::new();
                    let _ = stderr.read_to_string(&mut err).await;
                    let status = child.wait().await;
                    self.append_log(&format!(
                        "$ ha-cluster.sh stall-primary {secs}\n{seen}{err}"
                    ));
                    bail!("stall-primary printed no node name ({status:?}): {err}");
                }
            }
        };
        let log = self.log.clone();
        let waiter = tokio::spawn(async move {
            let mut rest = String::new();
            while let Ok(Some(line)) = lines.next_line().await {
                rest.push_str(&line);
                rest.push('\n');
            }
            let mut err = String::new();
            let _ = stderr.read_to_string(&mut err).await;
            let status = child.wait().await?;
            use std::io::Write as _;
            if let Ok(mut file) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
            {
                let _ = write!(
                    file,
                    "$ ha-cluster.sh stall-primary {secs} ({status})\n{seen}{rest}{err}"
                );
            }
            anyhow::ensure!(
                status.success(),
                "stall-primary exited with {status}: {err}"
            );
            Ok(())
        });
        Ok((node, waiter))
    }

    /// Every file under the cluster's directory whose name ends in `.log`
    /// (the PostgreSQL, Patroni, etcd and HAProxy logs).
    pub fn log_files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    walk(&path, found);
                } else if kind.is_file() && path.extension().is_some_and(|e| e == "log") {
                    found.push(path);
                }
            }
        }
        let mut found = Vec::new();
        walk(&self.dir, &mut found);
        found.sort();
        found
    }

    /// Stops the cluster (`stop DIR`) and, when `remove`, deletes its
    /// directory; otherwise prints where it is kept.
    pub async fn stop(&self, remove: bool) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        if let Err(err) = self.run(&["stop"], Duration::from_secs(120)).await {
            println!("chaos: stopping the HA cluster: {err:#}");
        }
        if remove {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            println!(
                "chaos: the HA cluster's directory is kept in {}",
                self.dir.display()
            );
        }
    }
}

impl Drop for HaCluster {
    fn drop(&mut self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        // An error or an interrupt: stop it synchronously, keep the logs.
        let status = std::process::Command::new(&self.script)
            .arg("stop")
            .arg(&self.dir)
            .env("CHATD_HA_PORT_BASE", self.port_base.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        eprintln!(
            "chaos: the HA cluster was stopped ({}); its directory is kept in {}",
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            self.dir.display()
        );
    }
}

/// The kinds of database fault of an HA run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `kill -9` of the primary's Patroni and PostgreSQL, the node started
    /// again once another node leads.
    Kill,
    /// SIGSTOP of the primary's processes past Patroni's TTL, then SIGCONT.
    Stall,
    /// A planned switchover to the sync standby.
    Switchover,
}

impl FaultKind {
    /// The name printed and counted.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kill => "ha_kill_primary",
            Self::Stall => "ha_stall_primary",
            Self::Switchover => "ha_switchover",
        }
    }
}

/// One database fault of an HA run, as it happened.
#[derive(Debug, Clone)]
pub struct DbFault {
    /// What was done.
    pub kind: FaultKind,
    /// The primary it hit (the old primary of a switchover).
    pub node: String,
    /// When it took effect: the kill returned, the stalled node was named
    /// (its processes stopped), the switchover was asked for.
    pub at: Instant,
    /// The new primary and when it was first seen leading (`None`: never
    /// seen another leader, as when a stalled node keeps its lead).
    pub new_primary: Option<(String, Instant)>,
    /// When the cluster was healthy again (`None`: it was not).
    pub healthy: Option<Instant>,
}

/// What [`run_faults`] returns: the faults done, and an error that ended
/// the loop early (the cluster not getting healthy again, a script
/// failure): a failed run.
pub struct FaultRecord {
    /// The faults, in order.
    pub faults: Vec<DbFault>,
    /// Why the loop ended early, when it did.
    pub error: Option<String>,
}

/// Polls [`HaCluster::primary`] every 300 ms until it names a node other
/// than `old`, at most `timeout`; returns the name and when it was seen.
async fn new_primary(
    cluster: &HaCluster,
    old: &str,
    timeout: Duration,
) -> Option<(String, Instant)> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(name) = cluster.primary().await
            && name != old
        {
            return Some((name, Instant::now()));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    None
}

/// The database fault loop of an HA run: rounds of the three kinds in a
/// seeded order, 2–5 s apart (the first 3–6 s into the run), each followed
/// by `wait-healthy` before the next. A fault starts only while the run's
/// `duration` lasts, except that when `duration` is at least 45 s the
/// first round is always completed (so a 60 s run has one of each kind:
/// the clients run on until it is). Prints every step with its time since
/// `started`.
pub async fn run_faults(
    cluster: &HaCluster,
    seed: u64,
    started: Instant,
    duration: Duration,
) -> FaultRecord {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(11));
    let mut record = FaultRecord {
        faults: Vec::new(),
        error: None,
    };
    let t = || started.elapsed().as_secs_f64();
    let mut round: Vec<FaultKind> = Vec::new();
    let mut first_round_left: u32 = if duration >= Duration::from_secs(45) {
        3
    } else {
        0
    };
    let mut gap = Duration::from_millis(rng.random_range(3_000..6_000));
    loop {
        tokio::time::sleep(gap).await;
        gap = Duration::from_millis(rng.random_range(2_000..5_000));
        if started.elapsed() >= duration && first_round_left == 0 {
            break;
        }
        if round.is_empty() {
            round = vec![FaultKind::Kill, FaultKind::Stall, FaultKind::Switchover];
            round.shuffle(&mut rng);
        }
        let kind = round.pop().unwrap_or(FaultKind::Kill);
        first_round_left = first_round_left.saturating_sub(1);
        let result = match kind {
            FaultKind::Kill => kill(cluster, &mut rng, &t).await,
            FaultKind::Stall => stall(cluster, &mut rng, &t).await,
            FaultKind::Switchover => switchover(cluster, &t).await,
        };
        match result {
            Ok(fault) => record.faults.push(fault),
            Err((fault, err)) => {
                println!("chaos: t={:>5.1}s {} failed: {err:#}", t(), kind.name());
                record.faults.extend(fault);
                record.error = Some(format!("{}: {err:#}", kind.name()));
                break;
            }
        }
    }
    record
}

type FaultResult = Result<DbFault, (Option<DbFault>, anyhow::Error)>;

/// Waits until the cluster is healthy (at most 90 s) and notes when.
async fn healthy(cluster: &HaCluster, mut fault: DbFault, t: &dyn Fn() -> f64) -> FaultResult {
    match cluster.wait_healthy(90).await {
        Ok(()) => {
            fault.healthy = Some(Instant::now());
            println!(
                "chaos: t={:>5.1}s   healthy again {:.1}s after the {}",
                t(),
                fault.at.elapsed().as_secs_f64(),
                fault.kind.name()
            );
            Ok(fault)
        }
        Err(err) => Err((Some(fault), err.context("wait-healthy"))),
    }
}

async fn kill(cluster: &HaCluster, rng: &mut StdRng, t: &dyn Fn() -> f64) -> FaultResult {
    let node = cluster.kill_primary().await.map_err(|e| (None, e))?;
    let mut fault = DbFault {
        kind: FaultKind::Kill,
        node: node.clone(),
        at: Instant::now(),
        new_primary: None,
        healthy: None,
    };
    println!("chaos: t={:>5.1}s fault ha_kill_primary {node}", t());
    fault.new_primary = new_primary(cluster, &node, Duration::from_secs(60)).await;
    match &fault.new_primary {
        Some((name, at)) => println!(
            "chaos: t={:>5.1}s   {name} leads, {:.1}s after the kill",
            t(),
            at.duration_since(fault.at).as_secs_f64()
        ),
        None => println!("chaos: t={:>5.1}s   no other node leads within 60 s", t()),
    }
    tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..4_000))).await;
    if let Err(err) = cluster.restart_node(&node).await {
        return Err((Some(fault), err.context("restart-node")));
    }
    println!("chaos: t={:>5.1}s   restarted {node}", t());
    healthy(cluster, fault, t).await
}

async fn stall(cluster: &HaCluster, rng: &mut StdRng, t: &dyn Fn() -> f64) -> FaultResult {
    let secs = rng.random_range(12..=15);
    let (node, waiter) = cluster.stall_primary(secs).await.map_err(|e| (None, e))?;
    let mut fault = DbFault {
        kind: FaultKind::Stall,
        node: node.clone(),
        at: Instant::now(),
        new_primary: None,
        healthy: None,
    };
    println!(
        "chaos: t={:>5.1}s fault ha_stall_primary {node} for {secs}s",
        t()
    );
    fault.new_primary = new_primary(cluster, &node, Duration::from_secs(secs + 5)).await;
    if let Some((name, at)) = &fault.new_primary {
        println!(
            "chaos: t={:>5.1}s   {name} leads, {:.1}s after the stall began",
            t(),
            at.duration_since(fault.at).as_secs_f64()
        );
    }
    match waiter.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err((Some(fault), err)),
        Err(err) => return Err((Some(fault), err.into())),
    }
    println!("chaos: t={:>5.1}s   {node} continued (SIGCONT)", t());
    healthy(cluster, fault, t).await
}

async fn switchover(cluster: &HaCluster, t: &dyn Fn() -> f64) -> FaultResult {
    let old = cluster.primary().await.unwrap_or_default();
    let at = Instant::now();
    println!("chaos: t={:>5.1}s fault ha_switchover from {old}", t());
    let mut fault = DbFault {
        kind: FaultKind::Switchover,
        node: old,
        at,
        new_primary: None,
        healthy: None,
    };
    let new = cluster
        .switchover()
        .await
        .map_err(|e| (Some(fault.clone()), e))?;
    println!(
        "chaos: t={:>5.1}s   {new} leads, {:.1}s after the switchover was asked for",
        t(),
        at.elapsed().as_secs_f64()
    );
    fault.new_primary = Some((new, Instant::now()));
    healthy(cluster, fault, t).await
}

/// The figures of one database fault, from the clients' ledger and the
/// error answers' times.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// From the fault to the first acknowledged send or edit whose
    /// successful attempt began after it (`None`: none in the run).
    pub first_write: Option<Duration>,
    /// The longest time without any acknowledged write, from the fault to
    /// the first acknowledgement after the cluster was healthy again.
    pub longest_gap: Duration,
    /// From the fault to the acknowledgement that ended the longest gap
    /// (writes resumed; for a switchover, whose first writes after the
    /// request still reach the old primary, the telling figure). `None`:
    /// no acknowledgement ended it.
    pub resumed: Option<Duration>,
    /// `503` answers from the fault until healthy again.
    pub unavailable: u64,
    /// Transport errors (no HTTP answer) in the same window.
    pub transport_errors: u64,
    /// Other `5xx` answers in the same window (`500` are violations).
    pub other_5xx: u64,
}

/// When the chats that were streaming at a database fault progressed
/// again, from the watchers' `message` events.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// Chats whose watcher received a `message` event in the 3 s before
    /// the fault (running chats).
    pub running: usize,
    /// Of those, the ones with a `message` event after another node was
    /// seen leading (before `end`).
    pub progressed: usize,
    /// From the fault to the last of those chats' first such event.
    pub all_after: Option<Duration>,
}

/// Computes [`Progress`] of `fault` from `views` (chat, watcher view);
/// events from `end` on (the next fault, the end of the run) are not
/// looked at. A fault with no other leader seen counts from its own time.
pub fn progress(fault: &DbFault, views: &[(String, View)], end: Instant) -> Progress {
    let from = fault.new_primary.as_ref().map_or(fault.at, |(_, at)| *at);
    let mut running = 0;
    let mut firsts = Vec::new();
    for (_, view) in views {
        let was_running = view
            .events
            .iter()
            .any(|at| *at <= fault.at && fault.at.duration_since(*at) <= Duration::from_secs(3));
        if !was_running {
            continue;
        }
        running += 1;
        if let Some(first) = view.events.iter().find(|at| **at >= from && **at < end) {
            firsts.push(first.duration_since(fault.at));
        }
    }
    Progress {
        running,
        progressed: firsts.len(),
        all_after: (firsts.len() == running && running > 0)
            .then(|| firsts.into_iter().max())
            .flatten(),
    }
}

/// Computes [`Figures`] of `fault` from the ledger's acknowledgements and
/// `stats.errors`; the window ends when the cluster was healthy again (or
/// at `end` when it never was). Acknowledgements from `end` on (the next
/// fault, or the end of the run) are not looked at.
pub fn figures(fault: &DbFault, ledger: &Ledger, stats: &Stats, end: Instant) -> Figures {
    let until = fault.healthy.unwrap_or(end).min(end);
    let mut acks: Vec<Instant> = ledger
        .written
        .iter()
        .filter_map(|w| w.acked_at)
        .filter(|at| *at > fault.at && *at < end)
        .collect();
    acks.sort();
    let first_write = ledger
        .written
        .iter()
        .filter(|w| w.attempt_started.is_some_and(|s| s >= fault.at))
        .filter_map(|w| w.acked_at)
        .min()
        .map(|at| at.duration_since(fault.at));
    let mut longest_gap = Duration::ZERO;
    let mut resumed = None;
    let mut previous = fault.at;
    for at in &acks {
        if at.duration_since(previous) > longest_gap {
            longest_gap = at.duration_since(previous);
            resumed = Some(at.duration_since(fault.at));
        }
        previous = *at;
        if *at > until {
            break;
        }
    }
    if acks.last().is_none_or(|last| *last <= until) && until.duration_since(previous) > longest_gap
    {
        longest_gap = until.duration_since(previous);
        resumed = None;
    }
    let in_window = |at: &Instant| *at >= fault.at && *at <= until;
    let count = |pred: &dyn Fn(u16) -> bool| {
        stats
            .errors
            .iter()
            .filter(|(at, status)| in_window(at) && pred(*status))
            .count() as u64
    };
    Figures {
        first_write,
        longest_gap,
        resumed,
        unavailable: count(&|s| s == 503),
        transport_errors: count(&|s| s == 0),
        other_5xx: count(&|s| s >= 500 && s != 503),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Written;

    fn written(started: Instant, acked_after_ms: Option<u64>) -> Written {
        Written {
            chat: "c".to_owned(),
            token: "tok-0-1".to_owned(),
            started,
            acked: acked_after_ms.is_some(),
            queued_id: None,
            message_id: None,
            attempt_started: acked_after_ms.map(|_| started),
            acked_at: acked_after_ms.map(|ms| started + Duration::from_millis(ms)),
        }
    }

    #[test]
    fn figures_measure_from_the_fault_to_writes_begun_after_it() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_secs(10);
        let fault = DbFault {
            kind: FaultKind::Kill,
            node: "pg1".to_owned(),
            at,
            new_primary: None,
            healthy: Some(at + Duration::from_secs(20)),
        };
        let ledger = Ledger {
            written: vec![
                // Begun before the fault, acknowledged just after it: not
                // the first write after the fault, but it ends a gap.
                written(at - Duration::from_millis(100), Some(200)),
                // Begun after it, acknowledged 11 s after it.
                written(at + Duration::from_secs(1), Some(10_000)),
                written(at + Duration::from_secs(12), Some(100)),
                // Never acknowledged.
                written(at + Duration::from_secs(2), None),
                // After the window.
                written(at + Duration::from_secs(25), Some(0)),
            ],
            ..Ledger::default()
        };
        let stats = Stats {
            errors: vec![
                (at - Duration::from_secs(1), 503),
                (at + Duration::from_secs(1), 503),
                (at + Duration::from_secs(2), 503),
                (at + Duration::from_secs(3), 0),
                (at + Duration::from_secs(4), 502),
                (at + Duration::from_secs(30), 503),
            ],
            ..Stats::default()
        };
        let f = figures(&fault, &ledger, &stats, at + Duration::from_secs(60));
        assert_eq!(f.first_write, Some(Duration::from_secs(11)));
        // 0.1 s → 11 s is the longest, then 12.1 s and 25 s (after the
        // window's end at 20 s: 12.1 → 25 = 12.9 s).
        assert_eq!(f.longest_gap, Duration::from_millis(12_900));
        assert_eq!(f.resumed, Some(Duration::from_secs(25)));
        assert_eq!((f.unavailable, f.transport_errors, f.other_5xx), (2, 1, 1));
        // The next fault at 22 s: the write at 25 s is not this one's.
        let f = figures(&fault, &ledger, &stats, at + Duration::from_secs(22));
        assert_eq!(f.longest_gap, Duration::from_millis(10_900));
        assert_eq!(f.resumed, Some(Duration::from_secs(11)));
    }

    #[test]
    fn chats_running_at_a_fault_progress_after_the_new_leader() {
        let at = Instant::now() + Duration::from_secs(10);
        let fault = DbFault {
            kind: FaultKind::Kill,
            node: "pg1".to_owned(),
            at,
            new_primary: Some(("pg2".to_owned(), at + Duration::from_secs(9))),
            healthy: None,
        };
        let view = |offsets_ms: &[i64]| View {
            events: offsets_ms
                .iter()
                .map(|ms| {
                    if *ms < 0 {
                        at - Duration::from_millis(ms.unsigned_abs())
                    } else {
                        at + Duration::from_millis(*ms as u64)
                    }
                })
                .collect(),
            ..View::default()
        };
        let views = vec![
            // Running; an event just after the fault (before the new
            // leader) does not count, the one at 11 s does.
            ("a".to_owned(), view(&[-500, 100, 11_000])),
            ("b".to_owned(), view(&[-2_000, 12_500])),
            // Idle at the fault.
            ("c".to_owned(), view(&[-5_000, 20_000])),
        ];
        let p = progress(&fault, &views, at + Duration::from_secs(30));
        assert_eq!(
            p,
            Progress {
                running: 2,
                progressed: 2,
                all_after: Some(Duration::from_millis(12_500)),
            }
        );
        // The next fault at 12 s: b had not progressed by then.
        let p = progress(&fault, &views, at + Duration::from_secs(12));
        assert_eq!((p.running, p.progressed, p.all_after), (2, 1, None));
    }

    #[test]
    fn a_fault_with_no_write_after_it_has_a_gap_to_the_windows_end() {
        let at = Instant::now();
        let fault = DbFault {
            kind: FaultKind::Switchover,
            node: "pg2".to_owned(),
            at,
            new_primary: None,
            healthy: None,
        };
        let f = figures(
            &fault,
            &Ledger::default(),
            &Stats::default(),
            at + Duration::from_secs(5),
        );
        assert_eq!(f.first_write, None);
        assert_eq!(f.longest_gap, Duration::from_secs(5));
        assert_eq!(f.resumed, None);
    }
}
