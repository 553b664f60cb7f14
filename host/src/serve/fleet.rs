//! The capsules one `mur serve` hosts: each one's phase, its address's token and
//! connection count, and starting and stopping them. One engine and one component
//! cache serve them all; each capsule has its own instances, workdir, queue, replay
//! ring, memory budget and confined shell.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::formations::Formations;
use super::metrics::Stats;
use super::registry::{Entry, Registry};
use super::token;
use crate::a2a;
use crate::capsule::{self, Launch, Options};
use crate::confine::Class;
use crate::control::{Control, FinishedTasks};
use crate::engine::Engine;
use crate::error::Error;
use crate::intake::Served;
use crate::manifest::{self, Manifest};
use crate::memory::Budget;
use crate::server::SessionOver;
use crate::workdir::RecordsChoice;

/// Server-wide ceilings, and each capsule's where its creation set none.
#[derive(Clone, Copy)]
pub struct Ceilings {
    pub capsules: usize,
    pub connections: usize,
    pub capsule_connections: usize,
    pub capsule_memory_bytes: u64,
    /// A capsule's CPU share in millicores, where its creation set none.
    pub capsule_cpu: u32,
    /// A capsule's tokens per UTC day, where its creation set none (`None`: no ceiling).
    pub capsule_tokens_per_day: Option<u64>,
    /// The files the process may open.
    pub open_files: u64,
}

pub struct Fleet {
    pub engine: Engine,
    pub registry: Registry,
    /// `http://HOST:PORT`, which every capsule's address starts with.
    pub base_url: String,
    pub admin: token::Hash,
    pub ceilings: Ceilings,
    /// The capsules' CPU accounts, and the threads their guests run on.
    pub shares: Arc<crate::cpu::Scheduler>,
    pub stats: Stats,
    capsules: RwLock<HashMap<String, Arc<Hosted>>>,
    /// Connections open to the listener.
    pub connections: Arc<AtomicUsize>,
    /// Creations in flight, counted against the capsule ceiling with those hosted.
    creating: AtomicUsize,
    pub draining: AtomicBool,
    /// Every registered capsule has been brought back.
    pub restored: AtomicBool,
    /// The formations its capsules are members of, with their wiring.
    pub formations: Formations,
    /// The exporter every capsule's spans share, and whether they carry its id.
    telemetry: Option<(Arc<crate::telemetry::Exporter>, bool)>,
}

/// One hosted capsule.
pub struct Hosted {
    pub id: String,
    entry: Mutex<Entry>,
    token: Option<token::Hash>,
    /// Connections open to its address.
    pub connections: Arc<AtomicUsize>,
    phase: Mutex<Phase>,
    /// Tasks its earlier sessions ran (the current one counts its own).
    tasks_before: AtomicU64,
    /// What its guests' CPU time is charged to, across its sessions in this process.
    cpu: std::sync::OnceLock<crate::cpu::Account>,
}

/// Where a capsule is in its life.
enum Phase {
    Starting,
    Running(Live),
    /// Its session ended by itself (a capsule that exits after its task).
    Ended(String),
    /// Stopped by the operator, or deleted.
    Stopped,
    /// It could not start (after a restart, say its manifest went missing).
    Failed(String),
}

/// A running capsule's handles.
struct Live {
    name: String,
    session_id: String,
    served: Arc<Served>,
    control: Arc<Control>,
    finished: Arc<FinishedTasks>,
    memory: Arc<Budget>,
    /// Becomes true when the session has ended and wound down.
    done: tokio::sync::watch::Receiver<bool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fleet {
    pub fn new(
        engine: Engine,
        registry: Registry,
        base_url: String,
        admin: token::Hash,
        (ceilings, shares): (Ceilings, Arc<crate::cpu::Scheduler>),
    ) -> Fleet {
        Fleet {
            engine,
            registry,
            base_url,
            admin,
            ceilings,
            shares,
            stats: Stats::default(),
            capsules: RwLock::new(HashMap::new()),
            connections: Arc::new(AtomicUsize::new(0)),
            creating: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            restored: AtomicBool::new(false),
            formations: Formations::default(),
            telemetry: None,
        }
    }

    /// Spans of every capsule go to `exporter`, with each capsule's id when `ids`.
    pub fn with_telemetry(
        mut self,
        exporter: Option<Arc<crate::telemetry::Exporter>>,
        ids: bool,
    ) -> Self {
        self.telemetry = exporter.map(|e| (e, ids));
        self
    }

    pub fn get(&self, id: &str) -> Option<Arc<Hosted>> {
        self.capsules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Every hosted capsule, oldest first.
    pub fn all(&self) -> Vec<Arc<Hosted>> {
        let mut all: Vec<_> = self
            .capsules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        all.sort_by_key(|h| (h.created_at(), h.id.clone()));
        all
    }

    pub fn address(&self, id: &str) -> String {
        format!("{}/c/{id}/", self.base_url)
    }

    /// A place for one more capsule under the ceiling, held until `Reserved` drops.
    pub fn reserve(&self) -> Option<Reserved<'_>> {
        self.reserve_many(1)
    }

    /// Places for `n` more capsules (a formation's members), all or none.
    pub fn reserve_many(&self, n: usize) -> Option<Reserved<'_>> {
        let creating = self.creating.fetch_add(n, Ordering::AcqRel);
        let reserved = Reserved(&self.creating, n);
        (self.count() + creating + n <= self.ceilings.capsules).then_some(reserved)
    }

    fn count(&self) -> usize {
        self.capsules
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether one more capsule's files fit under the process's limit, with what the
    /// open connections and the server itself hold.
    pub fn files_left(&self) -> bool {
        self.files_left_for(1)
    }

    /// Whether `n` more capsules' files fit, as [`Fleet::files_left`] counts.
    pub fn files_left_for(&self, n: usize) -> bool {
        let held = (self.count() as u64 + n as u64)
            .saturating_mul(super::FILES_PER_CAPSULE)
            .saturating_add(self.connections.load(Ordering::Relaxed) as u64)
            .saturating_add(64);
        held <= self.ceilings.open_files
    }

    /// Registers and starts a new capsule. On failure nothing of it is left on disk.
    pub async fn create(
        self: &Arc<Self>,
        entry: Entry,
        token: Option<&str>,
    ) -> Result<Arc<Hosted>, Error> {
        let hosted = Arc::new(Hosted::new(entry, token.map(token::Hash::of)));
        let saved = self.registry.save(&hosted.entry());
        let started = match saved {
            Ok(()) => self.start(&hosted).await,
            Err(e) => Err(e),
        };
        if let Err(e) = started {
            let _ = self.registry.remove(&hosted.id, true);
            return Err(e);
        }
        self.insert(hosted.clone());
        Ok(hosted)
    }

    fn insert(&self, hosted: Arc<Hosted>) {
        self.capsules
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(hosted.id.clone(), hosted);
    }

    /// Brings back every capsule the registry holds: stopped ones stay stopped, the
    /// others start again as a new session that resumes the last.
    pub async fn restore(self: &Arc<Self>) -> Vec<String> {
        let (entries, mut problems) = self.registry.load();
        problems.extend(self.formations.restore(&self.registry, &entries));
        for entry in entries {
            let token = entry
                .token_sha256
                .as_deref()
                .map(|hex| token::Hash::from_hex(hex).ok_or(()));
            let token = match token {
                Some(Err(())) => {
                    problems.push(format!("{}: its token hash is not valid", entry.id));
                    continue;
                }
                Some(Ok(hash)) => Some(hash),
                None => None,
            };
            let stopped = entry.stopped;
            let unwired = self.formations.unwired(&entry);
            let hosted = Arc::new(Hosted::new(entry, token));
            self.insert(hosted.clone());
            if let Some(why) = unwired {
                // None of a formation restored incomplete runs: a member without its
                // callers or callees would answer otherwise than it was made to.
                problems.push(format!("{}: {why}", hosted.id));
                hosted.set(Phase::Failed(why.clone()));
                self.fail_waiting(&hosted.id, &why);
                continue;
            }
            if stopped {
                hosted.set(Phase::Stopped);
                // Stopped as the server died, before its queue was emptied.
                self.fail_waiting(&hosted.id, "the capsule is stopped");
                continue;
            }
            if let Err(e) = self.start(&hosted).await {
                problems.push(format!("{}: {e}", hosted.id));
                let why = format!(
                    "the capsule could not start again ({}: {})",
                    e.code, e.message
                );
                self.fail_waiting(&hosted.id, &crate::secret::scrub(&why));
            }
        }
        self.restored.store(true, Ordering::Release);
        problems
    }

    /// What waited in the queue of a capsule that is not running again ends `FAILED`
    /// with `why`, so no client's task waits for a start that may never come.
    fn fail_waiting(&self, id: &str, why: &str) {
        let failed = capsule::fail_waiting(&self.registry.tasks(id), why, id);
        if failed > 0 {
            eprintln!(
                "warning[W-QUEUE-003]: capsule {id}: {failed} queued task(s) failed: {why}\n  hint: their clients read this reason with GetTask once the capsule is started"
            );
        }
    }

    /// Stages, opens and runs the capsule's session; returns once it can take tasks.
    /// A capsule that cannot start is `failed`, with the reason.
    pub async fn start(self: &Arc<Self>, hosted: &Arc<Hosted>) -> Result<(), Error> {
        hosted.set(Phase::Starting);
        let started = self.launch(hosted).await;
        if let Err(e) = &started {
            hosted.set(Phase::Failed(
                crate::secret::scrub(&e.to_string()).into_owned(),
            ));
        }
        started
    }

    async fn launch(self: &Arc<Self>, hosted: &Arc<Hosted>) -> Result<(), Error> {
        let begun = Instant::now();
        let entry = hosted.entry();
        let m = Arc::new(load(&entry)?);
        self.engine.check_memory(m.capabilities.memory_bytes)?;
        let memory = Budget::new(
            entry
                .limits
                .memory_bytes
                .unwrap_or(self.ceilings.capsule_memory_bytes),
        );
        let (work, records) = (
            self.registry.workdir(&entry.id),
            self.registry.records(&entry.id),
        );
        // A capsule that ran before resumes its last session: what that session
        // detached and never accounted for is reported lost.
        let resume = crate::resume::find(&records, "@1").is_ok();
        let options = Options {
            records: RecordsChoice {
                manifest_dir: &m.dir,
                workdir: Some(&work),
                records: Some(&records),
            },
            loop_path: None,
            // An unconfined command could leave orphans to this process, where no
            // capsule owns them: every shell here is at least scoped.
            containment: Some(Class::Scoped),
            launch: Launch::None,
            resume: resume.then_some("@1"),
            journal: Some(self.registry.journal(&entry.id)),
            tasks: Some(self.registry.tasks(&entry.id)),
            memory: Some(memory.clone()),
            cpu: Some(hosted.cpu_account(self)),
            spend: Some(self.spend_of(&entry)),
            seat: self.formations.seat(&entry)?,
            telemetry: self
                .telemetry
                .as_ref()
                .map(|(exporter, ids)| crate::telemetry::Attach {
                    exporter: exporter.clone(),
                    capsule_id: ids.then(|| entry.id.clone()),
                    parent: None,
                }),
        };
        let staged = capsule::stage(&self.engine, m.clone(), options).await?;
        let opened = staged.open(&self.address(&entry.id)).await?;
        let launched = opened.launched();
        let (tell_done, done) = tokio::sync::watch::channel(false);
        let served = opened.served(match entry.token_sha256 {
            Some(_) => a2a::Guard::Bearer,
            None => a2a::Guard::Open,
        });
        let relay = self.formations.relay(&entry);
        if let Some(relay) = &relay {
            relay.attach(&launched.session_id, served.clone());
        }
        let live = Live {
            name: m.name.clone(),
            session_id: launched.session_id.clone(),
            served,
            control: launched.control.clone(),
            finished: launched.control.finished.clone(),
            memory,
            done,
        };
        hosted.set(Phase::Running(live));
        self.stats.started(begun.elapsed());
        let hosted = hosted.clone();
        let workdir = launched.workdir.clone();
        let session_id = launched.session_id.clone();
        // On the guests' threads, apart from the host's, so the wire's work never
        // waits behind a tenant's guest code.
        self.shares.spawn(async move {
            let ended = opened.run(Instant::now(), |_| {}).await;
            let mut reason = format!("session ended: {}", ended.exit_status);
            if let Err(e) = &ended.ran {
                // No terminal hears a hosted capsule: its failure goes where the
                // operator looks, its state and its log.
                workdir.log(&format!("the session failed: {e}"));
                reason = format!("{reason}: {}", crate::secret::scrub(&e.message));
            }
            if let Some(relay) = relay {
                relay.detach(&session_id);
            }
            hosted.ended(reason);
            let _ = tell_done.send(true);
        });
        Ok(())
    }

    /// Ends the capsule's session (its queued and running tasks are canceled) and
    /// waits, at most `limit`, until it has wound down.
    pub async fn stop(&self, hosted: &Hosted, limit: Duration) {
        // Its connections close once the session is over (see `server::Route`); its bus
        // is not closed here, which would tell a watch `capsule-closed` first. Over,
        // the session publishes nothing more to the journal the next start reopens.
        let running = match &*hosted.phase() {
            Phase::Running(live) => {
                live.control.stop();
                Some(live.done.clone())
            }
            _ => None,
        };
        if let Some(mut done) = running {
            let _ = tokio::time::timeout(limit, done.wait_for(|d| *d)).await;
        }
        hosted.retire_tasks();
        hosted.set(Phase::Stopped);
    }

    /// Forgets a stopped capsule.
    pub fn remove(&self, id: &str) {
        self.capsules
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
    }

    /// The capsule's own day of tokens: its ceiling (its creation's, else the
    /// server's) and its ledger, kept in its records so a restart does not reset it.
    fn spend_of(&self, entry: &Entry) -> crate::spend::Capsule {
        crate::spend::Capsule {
            tokens_per_day: entry
                .limits
                .tokens_per_day
                .or(self.ceilings.capsule_tokens_per_day),
            ledger: self.registry.spend_ledger(&entry.id),
        }
    }

    /// What the capsule counted today (UTC) against its `tokens_per_day`; `used` is
    /// null when its ledger cannot be read.
    fn tokens_today(&self, entry: &Entry) -> Value {
        let spend = self.spend_of(entry);
        let day = crate::spend::today();
        let used = crate::spend::Ledger::new(spend.ledger).used_on(day).ok();
        json!({
            "day": day.format("%Y-%m-%d").to_string(),
            "used": used,
            "per_day": spend.tokens_per_day,
        })
    }
}

/// One place under the capsule ceiling.
pub struct Reserved<'a>(&'a AtomicUsize, usize);

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}

/// The capsule's manifest, with its creation ceilings applied.
fn load(entry: &Entry) -> Result<Manifest, Error> {
    let mut m = manifest::load(&entry.manifest)?.manifest;
    // Its lock's digests, or the registry's; what a capsule resolves is in its trace.
    crate::registry::resolve::resolve_here(&mut m, &mut |_| {})?;
    if let Some(queued) = entry.limits.queued_tasks {
        let queued = usize::try_from(queued).unwrap_or(usize::MAX);
        m.lifecycle.queue_depth = m.lifecycle.queue_depth.min(queued.max(1));
    }
    Ok(m)
}

impl Hosted {
    fn new(entry: Entry, token: Option<token::Hash>) -> Hosted {
        Hosted {
            id: entry.id.clone(),
            entry: Mutex::new(entry),
            token,
            connections: Arc::new(AtomicUsize::new(0)),
            phase: Mutex::new(Phase::Starting),
            tasks_before: AtomicU64::new(0),
            cpu: std::sync::OnceLock::new(),
        }
    }

    pub fn entry(&self) -> Entry {
        lock(&self.entry).clone()
    }

    pub fn set_entry(&self, entry: Entry) {
        *lock(&self.entry) = entry;
    }

    fn created_at(&self) -> u64 {
        lock(&self.entry).created_at
    }

    /// The connections its address may hold at once.
    pub fn connection_limit(&self, default: usize) -> usize {
        lock(&self.entry).limits.connections.unwrap_or(default)
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        lock(&self.phase)
    }

    fn set(&self, phase: Phase) {
        *self.phase() = phase;
    }

    /// The session ended by itself; a stop already under way keeps its `stopped`.
    fn ended(&self, reason: String) {
        let mut phase = self.phase();
        if matches!(*phase, Phase::Running(_)) {
            if let Phase::Running(live) = &*phase {
                let ran = live.finished.count() as u64;
                self.tasks_before.fetch_add(ran, Ordering::Relaxed);
            }
            *phase = Phase::Ended(reason);
        }
    }

    fn retire_tasks(&self) {
        if let Phase::Running(live) = &*self.phase() {
            let ran = live.finished.count() as u64;
            self.tasks_before.fetch_add(ran, Ordering::Relaxed);
        }
    }

    /// Whether a request with this `Authorization` may reach the capsule.
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        match &self.token {
            Some(hash) => hash.admits(authorization),
            None => true,
        }
    }

    /// What its address serves while it runs, and what says when it no longer does.
    pub fn served(&self) -> Result<(Arc<Served>, SessionOver), &'static str> {
        match &*self.phase() {
            Phase::Running(live) => Ok((live.served.clone(), live.done.clone())),
            Phase::Starting => Err("is starting"),
            Phase::Ended(_) => Err("has ended its session"),
            Phase::Stopped => Err("is stopped"),
            Phase::Failed(_) => Err("could not start"),
        }
    }

    pub fn state(&self) -> &'static str {
        match &*self.phase() {
            Phase::Starting => "starting",
            Phase::Running(live) if live.control.running.busy() => "running",
            Phase::Running(_) => "idle",
            Phase::Ended(_) => "ended",
            Phase::Stopped => "stopped",
            Phase::Failed(_) => "failed",
        }
    }

    /// Whether it runs a task or has one waiting.
    pub fn busy(&self) -> bool {
        match &*self.phase() {
            Phase::Running(live) => live.control.running.busy() || live.control.queue.waiting() > 0,
            _ => false,
        }
    }

    pub fn tasks_run(&self) -> u64 {
        let now = match &*self.phase() {
            Phase::Running(live) => live.finished.count() as u64,
            _ => 0,
        };
        self.tasks_before.load(Ordering::Relaxed) + now
    }

    /// Its CPU account, made with its first session.
    fn cpu_account(&self, fleet: &Fleet) -> crate::cpu::Account {
        self.cpu
            .get_or_init(|| {
                let share = self
                    .entry()
                    .limits
                    .cpu
                    .unwrap_or(fleet.ceilings.capsule_cpu);
                fleet.shares.account(share)
            })
            .clone()
    }

    /// Its CPU figures as the admin API shows them.
    fn cpu_figures(&self, fleet: &Fleet) -> Value {
        let share = self
            .entry()
            .limits
            .cpu
            .unwrap_or(fleet.ceilings.capsule_cpu);
        let f = self.cpu.get().map(crate::cpu::Account::figures);
        json!({
            "share": f64::from(share) / 1000.0,
            "held_to": f.and_then(|f| (f.allotment != crate::cpu::UNLIMITED).then(|| f64::from(f.allotment) / 1000.0)),
            "guest_seconds": f.map_or(0.0, |f| f.guest_seconds),
            "throttled_seconds": f.map_or(0.0, |f| f.throttled_seconds),
            "shell_nice": crate::cpu::nice_for(share, fleet.shares.threads()),
        })
    }

    pub fn memory_bytes(&self) -> u64 {
        match &*self.phase() {
            Phase::Running(live) => live.memory.used(),
            _ => 0,
        }
    }

    /// The capsule as the admin API shows it.
    pub fn describe(&self, fleet: &Fleet, detail: bool) -> Value {
        let entry = self.entry();
        let (name, session_id, why) = match &*self.phase() {
            Phase::Running(live) => (Some(live.name.clone()), Some(live.session_id.clone()), None),
            Phase::Ended(reason) => (None, None, Some(reason.clone())),
            Phase::Failed(why) => (None, None, Some(why.clone())),
            _ => (None, None, None),
        };
        let mut out = json!({
            "id": self.id,
            "name": name,
            "state": self.state(),
            "tasks_run": self.tasks_run(),
            "memory_bytes": self.memory_bytes(),
            "cpu": self.cpu_figures(fleet),
            "address": fleet.address(&self.id),
            "created_at": entry.created_at,
        });
        if detail {
            out["session_id"] = json!(session_id);
            out["workdir"] = json!(fleet.registry.workdir(&self.id));
            out["manifest"] = json!(entry.manifest);
            out["open"] = json!(entry.token_sha256.is_none());
            out["limits"] = json!(entry.limits);
            out["tokens"] = fleet.tokens_today(&entry);
            out["connections"] = json!(self.connections.load(Ordering::Relaxed));
            out["reason"] = json!(why);
        }
        if let Some(membership) = &entry.formation {
            out["formation"] = json!(membership);
        }
        out
    }
}
