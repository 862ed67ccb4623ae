//! The store on a real Redis Cluster (three primaries started by the test
//! on loopback ports; `redis-server --cluster-enabled yes` joined by
//! `redis-cli --cluster create`): two replicas of the server (two tasks
//! layers) on it, a task's keys on another node than its owner's channel;
//! and a failover in the middle of running tasks, as the crate docs'
//! durability table says.

mod support;

use std::time::Duration;

use serde_json::json;
use support::cluster::{until, Cluster};
use support::fleet::*;
use support::*;
use tokio::time::timeout;
use tower_mcp_cancel::tasks::TaskStore;
use tower_mcp_cancel::McpRequest;
use tower_mcp_cancel_redis::{RedisStore, RedisStoreBuilder};

/// A store on `cluster`, found from its seeds starting at node `first`.
fn builder(cluster: &Cluster, first: usize) -> RedisStoreBuilder {
    let mut seeds = cluster.seeds();
    let len = seeds.len();
    seeds.rotate_left(first % len);
    RedisStore::cluster(seeds).timeout(Duration::from_millis(1500))
}

fn task_key(id: &str) -> String {
    format!("mcp:tasks:task:{{{id}}}")
}

fn channel(owner: &str) -> String {
    format!("mcp:tasks:owner:{{{owner}}}")
}

/// Creates tasks on `svc` (each by `make`, with a probe of its own) until
/// one's keys live on another node than its owner's channel; its id, its
/// owner and its probe's receiver.
async fn create_elsewhere(
    cluster: &Cluster,
    svc: &mut Svc,
    reader: &RedisStore,
    mut make: impl FnMut(i64) -> McpRequest,
) -> (String, String, tokio::sync::oneshot::Receiver<()>) {
    for n in 0..30 {
        let (p, dropped) = probe();
        let id = create(svc, make(100 + n).with_extension(p)).await;
        let owner = reader.get(&id).await.unwrap().unwrap().owner.unwrap();
        if cluster.primary_of(&task_key(&id)).await != cluster.primary_of(&channel(&owner)).await {
            return (id, owner, dropped);
        }
    }
    panic!("30 tasks, all on their owner's node");
}

/// Waits until `owner` is subscribed to its sharded channel.
async fn subscribed(cluster: &Cluster, owner: &str) {
    let node = &cluster.nodes[cluster.primary_of(&channel(owner)).await];
    until("the owner subscribed to its sharded channel", || async {
        let chans = node
            .command(redis::cmd("PUBSUB").arg("SHARDCHANNELS"))
            .await;
        matches!(chans, Ok(redis::Value::Array(c)) if !c.is_empty())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_cancel_update_across_two_replicas_on_a_cluster() {
    watch_panics();
    let Some(cluster) = Cluster::start(0).await else {
        return;
    };
    // Re-reads a minute apart: a drop or an answer is the sharded
    // message's.
    let slow = |first| {
        builder(&cluster, first)
            .reread(Duration::from_secs(60))
            .lease(Duration::from_secs(180))
    };
    let store_a = slow(0).connect().await.unwrap();
    let store_b = slow(1).connect().await.unwrap();
    let a = replica(store_a);
    let mut on_a = stack(a.clone(), |req: McpRequest| async move {
        if req.params_as::<serde_json::Value>()?["name"] == "ask" {
            let task = tower_mcp_cancel::tasks::TaskContext::of(&req).unwrap();
            let ask = json!({"method": "elicitation/create", "params": {"message": "name?"}});
            let answer = task.input("name", ask).await?;
            return Ok(json!({"content": [{"type": "text", "text": answer["content"]["name"]}]}));
        }
        sleeper(req).await
    });
    let mut on_b = stack(replica(store_b.clone()), sleeper);

    // Cancel: the task's keys on one node, A's channel on another.
    let (id, owner, dropped) = create_elsewhere(&cluster, &mut on_a, &store_b, |n| {
        call(n, "sleep", json!({"ms": 600_000}))
    })
    .await;
    assert_eq!(status(&mut on_b, &id).await["status"], "working");
    subscribed(&cluster, &owner).await;
    let ack = send(&mut on_b, task_req(3, "tasks/cancel", &id, json!({})))
        .await
        .unwrap();
    assert_eq!(ack["resultType"], "complete", "{ack}");
    timeout(BOUND, dropped)
        .await
        .expect("A dropped the work")
        .unwrap();
    assert_eq!(status(&mut on_a, &id).await["status"], "cancelled");

    // Update: an input answered through B reaches the handler on A.
    let (id, _, _) =
        create_elsewhere(&cluster, &mut on_a, &store_b, |n| call(n, "ask", json!({}))).await;
    let got = until_status(&mut on_b, &id, "input_required").await;
    assert_eq!(got["inputRequests"]["name"]["method"], "elicitation/create");
    let answer =
        json!({"inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}}});
    send(&mut on_b, task_req(4, "tasks/update", &id, answer))
        .await
        .unwrap();
    let done = until_status(&mut on_b, &id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada");
    assert_no_panic();
}

/// The shard of a primary: its index and its replica's.
async fn shard_of(cluster: &Cluster, key: &str) -> (usize, usize) {
    let primary = cluster.primary_of(key).await;
    (primary, cluster.replica_of(primary).await)
}

/// Starts tasks until one lands on `primary`'s shard (`Err`: a creation
/// there was refused); the others started on the way stay in the fleet.
async fn start_on(
    cluster: &Cluster,
    fleet: &mut Fleet,
    primary: usize,
) -> Result<String, serde_json::Value> {
    for _ in 0..30 {
        match fleet.start().await {
            Ok(id) if cluster.primary_of(&task_key(&id)).await == primary => return Ok(id),
            Ok(_) => {}
            Err(refused) => return Err(refused),
        }
    }
    panic!("30 tasks, none on node {primary}");
}

/// Whether `promoted` has taken over the shard of task `id`'s keys; if
/// not, a manual failover (`CLUSTER FAILOVER` on it) is asked, unless it
/// was asked (`asked`) less than 6 s ago: one the primary does not take
/// part in within 5 s (its MFSTART lost on a loaded machine) is abandoned
/// by Redis, and asked again then.
async fn manual_failover(
    cluster: &Cluster,
    id: &str,
    promoted: usize,
    asked: &std::cell::Cell<Option<std::time::Instant>>,
) -> bool {
    if cluster.primary_of(&task_key(id)).await == promoted {
        return true;
    }
    if asked
        .get()
        .is_none_or(|at| at.elapsed() > Duration::from_secs(6))
    {
        asked.set(Some(std::time::Instant::now()));
        // (An error: it took over meanwhile, read at the next poll.)
        let _ = cluster.nodes[promoted]
            .command(redis::cmd("CLUSTER").arg("FAILOVER"))
            .await;
    }
    false
}

/// The planned-failover row of the default setting on a cluster: a
/// manual failover (`CLUSTER FAILOVER`) while tasks run and new ones are
/// created, some on its shard: Redis holds the primary's clients until
/// its replica has caught up, so every acknowledged task survives and
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_cluster_failover_loses_no_acknowledged_task_with_the_default() {
    watch_panics();
    let Some(cluster) = Cluster::start(1).await else {
        return;
    };
    let mut fleet = Fleet::new(|n| builder(&cluster, n), 0).await;
    for _ in 0..3 {
        fleet.start().await.expect("acknowledged");
    }
    let first = fleet.tasks[0].0.clone();
    let (shard, promoted) = shard_of(&cluster, &task_key(&first)).await;
    let asked = std::cell::Cell::new(None);
    let started = std::time::Instant::now();
    let mut on_shard = 0;
    let before = fleet.tasks.len();
    // Creations go on through the failover (a refused one is no loss).
    while !manual_failover(&cluster, &first, promoted, &asked).await {
        assert!(started.elapsed() < BOUND, "the failover never ended");
        for _ in 0..10 {
            if let Ok(id) = fleet.start().await {
                let primary = cluster.primary_of(&task_key(&id)).await;
                on_shard += usize::from(primary == shard || primary == promoted);
            }
        }
    }
    eprintln!(
        "FIGURE cluster CLUSTER FAILOVER, acknowledged_by(0): {} tasks acknowledged during \
         it, {on_shard} of them on its shard; all must survive",
        fleet.tasks.len() - before
    );
    cluster.replicas_online(1).await;
    fleet.all_survive_and_end().await;
    assert_no_panic();
}

/// The durable rows of the table: with `acknowledged_by(1)`, a manual
/// failover (`CLUSTER FAILOVER`) and a primary killed with -9, tasks
/// running, lose no acknowledged task; a creation no replica could
/// acknowledge is refused, not acknowledged; every task still ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_loses_no_acknowledged_task_with_the_durable_setting() {
    watch_panics();
    let Some(mut cluster) = Cluster::start(1).await else {
        return;
    };
    let mut fleet = Fleet::new(|n| builder(&cluster, n), 1).await;
    for _ in 0..6 {
        fleet.start().await.expect("acknowledged by a replica");
    }
    // A manual failover of one shard (CLUSTER FAILOVER on its replica)...
    let first = fleet.tasks[0].0.clone();
    let (shard, promoted) = shard_of(&cluster, &task_key(&first)).await;
    let asked = std::cell::Cell::new(None);
    until("the replica took over", || async {
        manual_failover(&cluster, &first, promoted, &asked).await
    })
    .await;
    // ...then, its replica stopped, another shard refuses creations...
    let mut other = None;
    for (i, node) in cluster.nodes.iter().enumerate() {
        if i != promoted && i != shard && node.info("replication").await.contains("role:master") {
            other = Some(i);
            break;
        }
    }
    let other = other.expect("another primary");
    let other_replica = cluster.replica_of(other).await;
    cluster.nodes[other_replica].pause();
    let refused = start_on(&cluster, &mut fleet, other).await;
    assert!(
        refused.is_err(),
        "acknowledged with no replica: {refused:?}"
    );
    cluster.nodes[other_replica].resume();
    cluster.replicas_online(1).await;
    // ...and its primary is killed with -9, tasks running.
    let measured = start_on(&cluster, &mut fleet, other)
        .await
        .expect("acknowledged by the replica");
    cluster.nodes[other].kill();
    let failing = failing_until_served(&fleet.store_b, &measured, || async {
        cluster.primary_of(&task_key(&measured)).await != other
    })
    .await;
    eprintln!("FIGURE cluster kill -9 (durable): calls on its slots failed for {failing:?}");
    // Back, it is the new primary's replica: the shard's ends can be
    // acknowledged again (until then they are tried again, not lost).
    cluster.nodes[other].restart();
    cluster.replicas_online(1).await;
    fleet.all_survive_and_end().await;
    assert_no_panic();
}

/// The non-durable row of the table: with the default setting, a task
/// acknowledged by its primary alone is lost when that primary is killed
/// before its replica had it; the other shards' tasks survive and end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_may_lose_an_acknowledged_task_without_it() {
    watch_panics();
    let Some(mut cluster) = Cluster::start(1).await else {
        return;
    };
    let mut fleet = Fleet::new(|n| builder(&cluster, n), 0).await;
    for _ in 0..3 {
        fleet.start().await.expect("acknowledged");
    }
    let first = fleet.tasks[0].0.clone();
    let (shard, replica) = shard_of(&cluster, &task_key(&first)).await;
    for node in 0..cluster.nodes.len() {
        if cluster.nodes[node]
            .info("replication")
            .await
            .contains("role:master")
        {
            cluster.synced(node).await;
        }
    }
    // Its replica stopped, and cut off (what was sent before the cut
    // still reaches it when it resumes): the next task on the shard is
    // acknowledged by the primary alone.
    cluster.nodes[replica].pause();
    cluster.nodes[shard]
        .command(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"))
        .await
        .unwrap();
    let lost = start_on(&cluster, &mut fleet, shard)
        .await
        .expect("acknowledged without a replica");
    fleet.tasks.pop();
    // The tasks written before (replicated) survive the kill.
    cluster.nodes[shard].kill();
    cluster.nodes[replica].resume();
    until("the replica took over", || async {
        cluster.primary_of(&task_key(&lost)).await == replica
    })
    .await;
    let got = timeout(BOUND, async {
        loop {
            if let Ok(got) = fleet.store_b.get(&lost).await {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the shard serves again");
    assert!(got.is_none(), "an unreplicated write survived: {got:?}");
    fleet.all_survive_and_end().await;
    assert_no_panic();
}
