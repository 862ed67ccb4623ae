//! The store through Redis Sentinel (a primary, its replica and one
//! `redis-sentinel`, started by the tests on loopback ports): it follows a
//! failover (`SENTINEL FAILOVER`, a primary killed with -9) in the middle
//! of running tasks; calls during one fail with `Unavailable` within the
//! store's timeout and succeed after; and what a failover keeps is what
//! the crate docs' durability table says.

mod support;

use std::time::{Duration, Instant};

use support::cluster::{until, Node, Sentinel, MASTER, PRIMARY_PASSWORD, SENTINEL_PASSWORD};
use support::fleet::*;
use support::{assert_no_panic, watch_panics};
use tokio::time::timeout;
use tower_mcp_cancel::tasks::TaskStore;
use tower_mcp_cancel_redis::{RedisStore, RedisStoreBuilder};

async fn fleet(set: &Sentinel, durable: usize) -> Fleet {
    let sentinels = set.sentinels();
    Fleet::new(|_| RedisStore::sentinel(sentinels.clone(), MASTER), durable).await
}

/// Waits until the Sentinel names `node` as the primary.
async fn named(set: &Sentinel, node: &Node) {
    until("the Sentinel names the new primary", || async {
        set.named().await == Some(node.port)
    })
    .await;
}

/// Stops `node`'s replica and cuts it off (what was sent before still
/// reaches it when it resumes): writes from now on are the primary's only.
async fn cut_off(primary: &Node, replica: &Node) {
    replica.pause();
    primary
        .command(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"))
        .await
        .unwrap();
}

/// The durable rows of the table: with `acknowledged_by(1)`, a
/// `SENTINEL FAILOVER` and then a primary killed with -9, tasks running,
/// lose no acknowledged task; a creation no replica acknowledged is
/// refused; every task still ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_loses_no_acknowledged_task_with_the_durable_setting() {
    watch_panics();
    let Some(mut set) = Sentinel::start().await else {
        return;
    };
    let mut fleet = fleet(&set, 1).await;
    for _ in 0..4 {
        fleet.start().await.expect("acknowledged by the replica");
    }
    let first = fleet.tasks[0].0.clone();

    // No replica to acknowledge: refused, not acknowledged.
    cut_off(&set.primary, &set.replica).await;
    let refused = fleet.start().await;
    assert!(
        refused.is_err(),
        "acknowledged with no replica: {refused:?}"
    );
    set.replica.resume();
    set.in_sync().await;

    // A failover the Sentinel is asked for.
    let failing = planned_failover(&set, &fleet.store_b, &first).await;
    eprintln!("FIGURE sentinel SENTINEL FAILOVER: calls failed for {failing:?}");
    set.in_sync().await;
    fleet
        .start()
        .await
        .expect("acknowledged after the failover");

    // The new primary killed with -9.
    set.replica.kill();
    let failing = failing_until_served(&fleet.store_b, &first, || async {
        set.named().await == Some(set.primary.port)
    })
    .await;
    eprintln!("FIGURE sentinel kill -9: calls failed for {failing:?}");
    // Back, it is the new primary's replica: ends can be acknowledged
    // again (until then they are tried again, not lost).
    set.replica.restart();
    set.in_sync().await;
    fleet.all_survive_and_end().await;
    assert_no_panic();
}

/// The non-durable row: with the default, a task acknowledged by the
/// primary alone is gone once that primary is killed with -9 and its
/// replica promoted; the tasks written before survive and end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_may_lose_an_acknowledged_task_without_it() {
    watch_panics();
    let Some(mut set) = Sentinel::start().await else {
        return;
    };
    let mut fleet = fleet(&set, 0).await;
    for _ in 0..3 {
        fleet.start().await.expect("acknowledged");
    }
    set.in_sync().await;
    replicated(&set).await;
    cut_off(&set.primary, &set.replica).await;
    let lost = fleet.start().await.expect("acknowledged by the primary");
    fleet.tasks.pop();
    set.primary.kill();
    set.replica.resume();
    named(&set, &set.replica).await;
    let got = timeout(BOUND, async {
        loop {
            if let Ok(got) = fleet.store_b.get(&lost).await {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the new primary serves");
    assert!(got.is_none(), "an unreplicated write survived: {got:?}");
    fleet.all_survive_and_end().await;
    assert_no_panic();
}

/// The planned-failover row of the default setting: a `SENTINEL
/// FAILOVER` while tasks run and new ones are created. Every task the
/// replica had when the failover began survives and ends; a task
/// acknowledged while it runs (by the old primary, after the replica's
/// promotion and before its own demotion) may be lost: then it reads
/// unknown on every replica of the server and its owner drops its work
/// at its next re-read, none runs on for a task nobody can see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_sentinel_failover_keeps_what_the_replica_had_with_the_default() {
    watch_panics();
    let Some(set) = Sentinel::start().await else {
        return;
    };
    let mut fleet = fleet(&set, 0).await;
    for _ in 0..3 {
        fleet.start().await.expect("acknowledged");
    }
    set.in_sync().await;
    replicated(&set).await;
    failover(&set).await;
    // Creations go on through the failover, until the new primary serves
    // and the old one is a replica.
    let started = Instant::now();
    let mut during = Vec::new();
    let mut named_at = None;
    loop {
        assert!(started.elapsed() < BOUND, "the failover never ended");
        let named = set.named().await == Some(set.replica.port);
        if named && named_at.is_none() {
            named_at = Some(started.elapsed());
        }
        let switched = named && set.primary.info("replication").await.contains("role:slave");
        if fleet.start().await.is_ok() {
            during.extend(fleet.tasks.pop().map(|t| (t, started.elapsed())));
        }
        if switched {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    set.in_sync().await;
    let switched = started.elapsed();
    let mut lost = Vec::new();
    let acknowledged = during.len();
    for ((id, dropped), at) in during {
        let got = timeout(BOUND, async {
            loop {
                if let Ok(got) = fleet.store_b.get(&id).await {
                    return got;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the new primary serves");
        if got.is_some() {
            fleet.tasks.push((id, dropped));
        } else {
            lost.push(at);
            timeout(BOUND, dropped)
                .await
                .expect("the owner dropped the work of a lost task")
                .unwrap();
        }
    }
    let named_at = named_at.expect("named");
    eprintln!(
        "FIGURE sentinel SENTINEL FAILOVER, acknowledged_by(0): {} of the {acknowledged} \
         tasks acknowledged during the failover lost (acknowledged from {:?} to {:?} after \
         it was asked; the new primary named after {named_at:?}, the old one a replica \
         after {switched:?})",
        lost.len(),
        lost.first(),
        lost.last(),
    );
    // The store heard the Sentinel name the new primary: it stopped
    // writing to the old one then, not when the old one was demoted.
    let heard = named_at + Duration::from_secs(1);
    assert!(
        lost.iter().all(|at| *at < heard),
        "writes to the old primary went on after the new one was named: {lost:?}"
    );
    fleet.all_survive_and_end().await;

    // A store listens to the Sentinel's announcements while it lives, and
    // no longer once dropped.
    let before = listeners(&set.sentinel).await;
    let store = RedisStore::sentinel(set.sentinels(), MASTER)
        .connect()
        .await
        .unwrap();
    until("the store listens", || async {
        listeners(&set.sentinel).await == before + 1
    })
    .await;
    drop(store);
    until("the dropped store's listener ends", || async {
        listeners(&set.sentinel).await == before
    })
    .await;
    assert_no_panic();
}

/// How many clients of `node` are subscribed to something.
async fn listeners(node: &Node) -> usize {
    let list = node
        .command(redis::cmd("CLIENT").arg("LIST"))
        .await
        .map(|v| redis::from_redis_value::<String>(v).unwrap_or_default())
        .unwrap_or_default();
    list.lines().filter(|l| l.contains(" sub=1 ")).count()
}

/// Waits until the replica has every write the primary took.
async fn replicated(set: &Sentinel) {
    until("the replica has every write", || async {
        let offset = |info: String| {
            info.lines()
                .find_map(|l| l.strip_prefix("master_repl_offset:"))
                .map(|v| v.trim().to_owned())
        };
        let primary = offset(set.primary.info("replication").await);
        primary.is_some() && primary == offset(set.replica.info("replication").await)
    })
    .await;
}

/// `connect` of `builder` within the bound (it never hangs): its error.
async fn refused(builder: RedisStoreBuilder) -> String {
    let start = std::time::Instant::now();
    let out = timeout(
        BOUND,
        builder.timeout(Duration::from_millis(1500)).connect(),
    )
    .await
    .expect("connect() hung");
    let e = out
        .expect_err("connected without the right credentials")
        .to_string();
    eprintln!("REFUSED in {:?}: {e}", start.elapsed());
    e
}

/// A primary and replica with `requirepass` (and `masterauth`), a Sentinel
/// with its own password and `auth-pass`: without `primary_auth` (or with
/// a wrong password, or the Sentinel's password missing from its URL)
/// `connect` fails with an error that says so, within its timeout; with it
/// (as the `default` user, and by password alone) tasks run through two
/// replicas of a server and follow a `SENTINEL FAILOVER`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_with_a_password_is_reached_with_primary_auth_and_followed() {
    watch_panics();
    let Some(set) = Sentinel::secured().await else {
        return;
    };
    let sentinels = set.sentinels();
    let without = refused(RedisStore::sentinel(sentinels.clone(), MASTER)).await;
    assert!(
        without.contains("primary_auth") && without.contains("NOAUTH"),
        "not a clear error: {without}"
    );
    let wrong =
        refused(RedisStore::sentinel(sentinels.clone(), MASTER).primary_auth(None, "wrong")).await;
    assert!(wrong.contains("primary_auth"), "not a clear error: {wrong}");
    assert!(!wrong.contains("wrong\""), "the password shown: {wrong}");
    let bare = set
        .sentinel
        .url()
        .replace(&format!(":{SENTINEL_PASSWORD}@"), "");
    let no_sentinel_password =
        refused(RedisStore::sentinel([bare], MASTER).primary_auth(None, PRIMARY_PASSWORD)).await;
    assert!(
        no_sentinel_password.contains("NOAUTH") || no_sentinel_password.contains("uthentication"),
        "not a clear error: {no_sentinel_password}"
    );

    let as_user = RedisStore::sentinel(sentinels.clone(), MASTER)
        .primary_auth(Some("default"), PRIMARY_PASSWORD)
        .connect()
        .await
        .expect("the default user with its password");
    assert!(as_user.get("unknown").await.unwrap().is_none());

    let mut fleet = Fleet::new(
        |_| RedisStore::sentinel(sentinels.clone(), MASTER).primary_auth(None, PRIMARY_PASSWORD),
        1,
    )
    .await;
    for _ in 0..3 {
        fleet.start().await.expect("acknowledged by the replica");
    }
    let first = fleet.tasks[0].0.clone();
    // The owner's subscription (its own connection) got in too.
    until("the owner subscribed on the primary", || async {
        listeners(&set.primary).await > 0
    })
    .await;
    let failing = planned_failover(&set, &fleet.store_b, &first).await;
    eprintln!("FIGURE sentinel with passwords, SENTINEL FAILOVER: calls failed for {failing:?}");
    set.in_sync().await;
    fleet
        .start()
        .await
        .expect("acknowledged after the failover");
    fleet.all_survive_and_end().await;
    assert_no_panic();
}

/// A failover the Sentinel is asked for, and how long `store`'s calls (on
/// the task `first`) failed through it. Until the old primary is demoted
/// it still takes writes: the failover is done when the Sentinel names
/// the replica and the old primary is a replica.
async fn planned_failover(set: &Sentinel, store: &RedisStore, first: &str) -> Duration {
    failover(set).await;
    failing_until_served(store, first, || async {
        set.named().await == Some(set.replica.port)
            && set.primary.info("replication").await.contains("role:slave")
    })
    .await
}

/// Asks the Sentinel for a failover (refused with NOGOODSLAVE until it
/// has seen the replica answer: asked until it takes it).
async fn failover(set: &Sentinel) {
    until("the Sentinel takes the failover", || async {
        set.sentinel
            .command(redis::cmd("SENTINEL").arg("FAILOVER").arg(MASTER))
            .await
            .is_ok()
    })
    .await;
}
