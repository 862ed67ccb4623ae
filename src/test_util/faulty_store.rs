//! [`FaultyStore`]: a [`TaskStore`] wrapper that fails, delays, hangs or
//! holds the operations a test schedules, and counts them.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use tokio::sync::watch;

use super::WAIT_BOUND;
use crate::tasks::{StoreError, TaskChange, TaskEnd, TaskRecord, TaskSignal, TaskStore};

/// An operation of a [`TaskStore`], for [`FaultyStore`]'s schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// [`TaskStore::create`].
    Create,
    /// [`TaskStore::get`].
    Get,
    /// [`TaskStore::update`].
    Update,
    /// [`TaskStore::finish`].
    Finish,
    /// [`TaskStore::signal_owner`].
    SignalOwner,
    /// [`TaskStore::owner_alive`].
    OwnerAlive,
    /// [`TaskStore::owner_signals`]: the fault applies to the stream it
    /// opens (see [`Fault`]).
    OwnerSignals,
}

/// What [`FaultyStore`] does to one call of an operation.
///
/// For [`Op::OwnerSignals`], whose call opens a stream: `Fail` gives a
/// stream that ends at once; `FailAfterApply` opens the inner stream and
/// ends at once; `Delay` and `Gate` start the inner stream after the wait;
/// `Hang` gives a stream that never yields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Fault {
    /// The call fails with [`StoreError::Unavailable`] without reaching the
    /// inner store.
    Fail,
    /// The inner store applies the call, then its answer is replaced by
    /// [`StoreError::Unavailable`]: a write that succeeded but whose answer
    /// was lost.
    FailAfterApply,
    /// The call reaches the inner store after this long, on tokio's clock
    /// (a paused test clock advances through it).
    Delay(Duration),
    /// The call never resolves.
    Hang,
    /// The call waits at the gate until [`Gate::open`], then reaches the
    /// inner store.
    Gate(Gate),
}

/// Holds calls until the test opens it, and says when one arrived: the way
/// to act in the instant a store call is in flight.
///
/// Clones share the gate. Once open it stays open.
#[derive(Clone, Debug)]
pub struct Gate {
    state: watch::Sender<GateState>,
}

#[derive(Clone, Copy, Debug, Default)]
struct GateState {
    arrived: usize,
    open: bool,
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Self {
            state: watch::Sender::new(GateState::default()),
        }
    }

    /// How many calls reached the gate so far (waiting or let through).
    pub fn arrivals(&self) -> usize {
        self.state.borrow().arrived
    }

    /// Resolves once `n` calls reached the gate (at once if they had).
    /// Panics after an hour of tokio's clock: a guard against hangs.
    pub async fn arrived(&self, n: usize) {
        let mut rx = self.state.subscribe();
        let arrived = tokio::time::timeout(WAIT_BOUND, rx.wait_for(|s| s.arrived >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        assert!(arrived, "Gate::arrived: {n} calls never reached the gate");
    }

    /// Lets every waiting call through, and every later one.
    pub fn open(&self) {
        self.state.send_modify(|s| s.open = true);
    }

    async fn pass(&self) {
        self.state.send_modify(|s| s.arrived += 1);
        let mut rx = self.state.subscribe();
        // The sender lives in `self`: the wait ends only when it opens.
        let _ = rx.wait_for(|s| s.open).await;
    }
}

/// How many calls of one operation a schedule entry covers.
#[derive(Debug)]
enum Times {
    Left(usize),
    UntilHealed,
}

#[derive(Debug, Default)]
struct Schedule {
    faults: HashMap<Op, VecDeque<(Times, Fault)>>,
    calls: HashMap<Op, usize>,
}

/// A [`TaskStore`] over another that injects the faults a test schedules,
/// per [`Op`]: a failure ([`StoreError::Unavailable`], its message says it
/// was injected), a write applied whose answer is lost, a delay on tokio's
/// clock, a call that never resolves, or a [`Gate`] the test opens; for the
/// next call ([`once`](Self::once)), the next `n` ([`times`](Self::times))
/// or every call until [`heal`](Self::heal)ed
/// ([`always`](Self::always)). It counts the calls of each operation
/// ([`calls`](Self::calls), [`called`](Self::called)).
///
/// Clones share the schedule, the counts and the inner store: keep one in
/// the test, give one to [`TasksLayer::with_store`](crate::tasks::TasksLayer::with_store).
/// Scheduled faults apply in the order given, each for its count of calls.
///
/// ```
/// use tower_mcp_cancel::tasks::{MemoryStore, TaskEnd, TaskRecord, TaskStore};
/// use tower_mcp_cancel::test_util::{Fault, FaultyStore, Gate, Op};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let store = FaultyStore::new(MemoryStore::new());
/// let record = |id: &str| -> TaskRecord {
///     serde_json::from_value(serde_json::json!({
///         "id": id, "status": "working", "status_message": null,
///         "created_at_ms": 0, "updated_at_ms": 0, "ttl_ms": null,
///         "poll_interval_ms": 100, "input_requests": {}, "result": null,
///         "error": null, "principal": null,
///     }))
///     .unwrap()
/// };
///
/// // The next `finish` is applied, but its answer is lost.
/// store.create(record("a")).await.unwrap();
/// store.once(Op::Finish, Fault::FailAfterApply);
/// let end = TaskEnd::Completed(serde_json::json!({}));
/// let err = store.finish("a", end, std::time::Duration::from_secs(60)).await.unwrap_err();
/// assert!(err.to_string().contains("injected"));
/// assert!(store.get("a").await.unwrap().unwrap().status.is_terminal());
///
/// // A `create` held in flight until the test lets it through.
/// let gate = Gate::new();
/// store.once(Op::Create, Fault::Gate(gate.clone()));
/// let held = tokio::spawn({
///     let store = store.clone();
///     async move { store.create(record("b")).await }
/// });
/// gate.arrived(1).await; // the call is in flight: act now
/// assert!(store.get("b").await.unwrap().is_none());
/// gate.open();
/// held.await.unwrap().unwrap();
/// assert_eq!(store.calls(Op::Create), 2);
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(all(feature = "test-util", feature = "tasks"))))]
pub struct FaultyStore<S> {
    inner: Arc<S>,
    schedule: Arc<Mutex<Schedule>>,
    /// The total of calls so far, for [`called`](Self::called).
    counted: Arc<watch::Sender<()>>,
}

impl<S> Clone for FaultyStore<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            schedule: self.schedule.clone(),
            counted: self.counted.clone(),
        }
    }
}

impl<S> fmt::Debug for FaultyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let schedule = self.lock();
        f.debug_struct("FaultyStore")
            .field("faults", &schedule.faults)
            .field("calls", &schedule.calls)
            .finish_non_exhaustive()
    }
}

impl<S: TaskStore> FaultyStore<S> {
    /// `inner`, with no fault scheduled.
    pub fn new(inner: S) -> Self {
        Self {
            inner: Arc::new(inner),
            schedule: Arc::default(),
            counted: Arc::new(watch::Sender::new(())),
        }
    }
}

impl<S> FaultyStore<S> {
    /// The wrapped store (reads through it see no fault).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Schedule> {
        self.schedule.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, op: Op, times: Times, fault: Fault) {
        self.lock()
            .faults
            .entry(op)
            .or_default()
            .push_back((times, fault));
    }

    /// `fault` for the next call of `op`.
    pub fn once(&self, op: Op, fault: Fault) {
        self.times(op, 1, fault);
    }

    /// `fault` for the next `n` calls of `op`.
    pub fn times(&self, op: Op, n: usize, fault: Fault) {
        if n > 0 {
            self.push(op, Times::Left(n), fault);
        }
    }

    /// `fault` for every call of `op` until [`heal`](Self::heal).
    pub fn always(&self, op: Op, fault: Fault) {
        self.push(op, Times::UntilHealed, fault);
    }

    /// Clears every fault scheduled for `op`; calls already waiting (a
    /// delay, a hang, a gate) keep waiting.
    pub fn heal(&self, op: Op) {
        self.lock().faults.remove(&op);
    }

    /// Clears every fault scheduled, for every operation.
    pub fn heal_all(&self) {
        self.lock().faults.clear();
    }

    /// How many calls of `op` were made so far (failed ones included).
    pub fn calls(&self, op: Op) -> usize {
        self.lock().calls.get(&op).copied().unwrap_or(0)
    }

    /// Resolves once `n` calls of `op` were made (at once if they were).
    /// Panics after an hour of tokio's clock: a guard against hangs.
    pub async fn called(&self, op: Op, n: usize) {
        let mut rx = self.counted.subscribe();
        let came = tokio::time::timeout(WAIT_BOUND, rx.wait_for(|()| self.calls(op) >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        assert!(came, "FaultyStore::called: {n} calls of {op:?} never came");
    }

    /// Counts a call of `op` and takes its fault, if one is scheduled.
    fn next(&self, op: Op) -> Option<Fault> {
        let fault = {
            let mut schedule = self.lock();
            *schedule.calls.entry(op).or_default() += 1;
            let queue = schedule.faults.get_mut(&op)?;
            let (times, fault) = queue.front_mut()?;
            let fault = fault.clone();
            if let Times::Left(n) = times {
                *n -= 1;
                if *n == 0 {
                    queue.pop_front();
                }
            }
            Some(fault)
        };
        self.counted.send_replace(());
        fault
    }
}

fn injected(op: Op, what: &str) -> StoreError {
    StoreError::Unavailable(format!("injected fault (FaultyStore): {op:?} {what}").into())
}

/// Runs one call of `op` under `fault`. The inner call is made only when
/// the fault lets it through: a store may apply a call when it is made
/// (the memory store does), not when its future is polled.
async fn faulted<'a, T: 'a>(
    op: Op,
    fault: Option<Fault>,
    call: impl FnOnce() -> BoxFuture<'a, Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match fault {
        None => call().await,
        Some(Fault::Fail) => Err(injected(op, "failed")),
        Some(Fault::FailAfterApply) => {
            let _ = call().await;
            Err(injected(op, "was applied, but its answer was lost"))
        }
        Some(Fault::Delay(d)) => {
            tokio::time::sleep(d).await;
            call().await
        }
        Some(Fault::Hang) => std::future::pending().await,
        Some(Fault::Gate(gate)) => {
            gate.pass().await;
            call().await
        }
    }
}

impl<S: TaskStore> TaskStore for FaultyStore<S> {
    fn create(&self, record: TaskRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        let fault = self.next(Op::Create);
        Box::pin(faulted(Op::Create, fault, move || {
            self.inner.create(record)
        }))
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let fault = self.next(Op::Get);
        Box::pin(faulted(Op::Get, fault, move || self.inner.get(id)))
    }

    fn update<'a>(
        &'a self,
        id: &'a str,
        change: TaskChange,
    ) -> BoxFuture<'a, Result<Option<TaskRecord>, StoreError>> {
        let fault = self.next(Op::Update);
        Box::pin(faulted(Op::Update, fault, move || {
            self.inner.update(id, change)
        }))
    }

    fn finish<'a>(
        &'a self,
        id: &'a str,
        end: TaskEnd,
        retain: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let fault = self.next(Op::Finish);
        Box::pin(faulted(Op::Finish, fault, move || {
            self.inner.finish(id, end, retain)
        }))
    }

    fn signal_owner<'a>(
        &'a self,
        owner: &'a str,
        signal: TaskSignal,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let fault = self.next(Op::SignalOwner);
        Box::pin(faulted(Op::SignalOwner, fault, move || {
            self.inner.signal_owner(owner, signal)
        }))
    }

    fn owner_signals(&self, owner: &str) -> Option<BoxStream<'static, TaskSignal>> {
        let fault = self.next(Op::OwnerSignals);
        match fault {
            None => self.inner.owner_signals(owner),
            Some(Fault::Fail) => Some(futures_util::stream::empty().boxed()),
            Some(Fault::FailAfterApply) => {
                drop(self.inner.owner_signals(owner));
                Some(futures_util::stream::empty().boxed())
            }
            Some(Fault::Hang) => Some(futures_util::stream::pending().boxed()),
            Some(wait @ (Fault::Delay(_) | Fault::Gate(_))) => {
                let inner = self.inner.owner_signals(owner)?;
                let start = async move {
                    match wait {
                        Fault::Delay(d) => tokio::time::sleep(d).await,
                        Fault::Gate(gate) => gate.pass().await,
                        _ => {}
                    }
                    inner
                };
                Some(futures_util::stream::once(start).flatten().boxed())
            }
        }
    }

    fn owner_alive<'a>(&'a self, owner: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let fault = self.next(Op::OwnerAlive);
        Box::pin(faulted(Op::OwnerAlive, fault, move || {
            self.inner.owner_alive(owner)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::MemoryStore;

    fn record(id: &str) -> TaskRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "status": "working", "status_message": null,
            "created_at_ms": 0, "updated_at_ms": 0, "ttl_ms": null,
            "poll_interval_ms": 100, "input_requests": {}, "result": null,
            "error": null, "principal": null,
        }))
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn faults_apply_in_order_for_their_count_until_healed() {
        let store = FaultyStore::new(MemoryStore::new());
        store.times(Op::Create, 2, Fault::Fail);
        store.always(Op::Create, Fault::Delay(Duration::from_secs(3)));
        for _ in 0..2 {
            let err = store.create(record("a")).await.unwrap_err();
            assert!(err.to_string().contains("injected fault"), "{err}");
        }
        assert!(
            store.inner().get("a").await.unwrap().is_none(),
            "a failure applies nothing"
        );
        let start = tokio::time::Instant::now();
        store.create(record("a")).await.unwrap();
        store.create(record("b")).await.unwrap();
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(6),
            "delayed until healed"
        );
        store.heal(Op::Create);
        store.create(record("c")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(6));
        assert_eq!(store.calls(Op::Create), 5);
        store.called(Op::Create, 5).await;
        assert_eq!(
            store.calls(Op::Get),
            0,
            "reads through inner() are not counted"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hang_never_resolves_and_a_failed_signal_stream_ends() {
        let store = FaultyStore::new(MemoryStore::new());
        store.once(Op::OwnerAlive, Fault::Hang);
        let hung = tokio::time::timeout(Duration::from_secs(3600), store.owner_alive("o")).await;
        assert!(hung.is_err());
        assert!(
            store.owner_alive("o").await.unwrap(),
            "the next call passes"
        );
        store.once(Op::OwnerSignals, Fault::Fail);
        let mut signals = store.owner_signals("o").expect("a stream");
        assert!(signals.next().await.is_none());
        assert!(
            store.owner_signals("o").is_none(),
            "the memory store's own: none"
        );
    }
}
