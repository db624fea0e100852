//! The operator's commands (`rmq cluster`, `rmq topics`, `rmq progress`, `rmq reset-offset`):
//! what `mqadmin clusterList`, `topicList`, `updateTopic`, `consumerProgress` and
//! `resetOffsetByTime` show, through [`rmq_admin::Admin`]. Plain output is a table with
//! mqadmin's column names; `--json` prints one object per line.

use rmq_admin::{Admin, TopicSpec};

type Res = Result<(), Box<dyn std::error::Error>>;

/// `rmq cluster`: every broker address, by cluster, broker name and id, with the version and
/// the put and get rates (messages/s over the last 10 s) each broker reports (`-` when it does
/// not answer, and for the rates of a broker up for less than 10 s, which has none yet).
pub async fn cluster(admin: &Admin, json: bool) -> Res {
    let mut all = admin.cluster().await?;
    all.sort_by(|a, b| (&a.cluster, &a.broker, a.id).cmp(&(&b.cluster, &b.broker, b.id)));
    if !json {
        println!(
            "{:<22}  {:<22}  {:<4}  {:<22}  {:<10}  {:>10}  #OutTPS",
            "#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS"
        );
    }
    for b in all {
        let stats = admin.broker_runtime(&b.addr).await.unwrap_or_else(|e| {
            crate::cli::warn_chain(&format!("{}: no runtime statistics", b.addr), &e);
            Default::default()
        });
        let stat = |k: &str| stats.get(k).map(String::as_str);
        // The first of the three rates; 4.9 spells the second key without the `r`.
        let rate = |k: &str| stat(k).and_then(|v| v.split(' ').next()?.parse::<f64>().ok());
        let (version, put) = (stat("brokerVersionDesc"), rate("putTps"));
        let get = rate("getTransferredTps").or_else(|| rate("getTransferedTps"));
        if json {
            let doc = serde_json::json!({
                "cluster": b.cluster, "brokerName": b.broker, "brokerId": b.id, "addr": b.addr,
                "version": version, "inTps": put, "outTps": get,
            });
            println!("{doc}");
        } else {
            let tps = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.2}"));
            println!(
                "{:<22}  {:<22}  {:<4}  {:<22}  {:<10}  {:>10}  {}",
                b.cluster,
                b.broker,
                b.id,
                b.addr,
                version.unwrap_or("-"),
                tps(put),
                tps(get)
            );
        }
    }
    Ok(())
}

/// `rmq topics list`: every topic the NameServer knows, sorted.
pub async fn list_topics(admin: &Admin, json: bool) -> Res {
    for t in admin.topics().await? {
        if json {
            println!("{}", serde_json::json!({ "topic": t }));
        } else {
            println!("{t}");
        }
    }
    Ok(())
}

/// `rmq topics create`: the topic on every master of the cluster.
pub async fn create_topic(
    admin: &Admin,
    json: bool,
    cluster: &str,
    topic: &str,
    spec: &TopicSpec,
) -> Res {
    let brokers = admin.create_topic(cluster, topic, spec).await?;
    if json {
        let doc = serde_json::json!({
            "topic": topic, "cluster": cluster, "brokers": brokers,
            "readQueueNums": spec.read_queues, "writeQueueNums": spec.write_queues,
            "perm": spec.perm, "order": spec.order,
        });
        println!("{doc}");
    } else {
        for b in brokers {
            println!("create topic {topic} to {b} success");
        }
    }
    Ok(())
}

/// `rmq progress`: the group's offsets and lag per queue, and the total lag.
pub async fn progress(admin: &Admin, json: bool, group: &str, topic: Option<&str>) -> Res {
    let rows = admin.progress(group, topic).await?;
    if rows.is_empty() {
        return Err(format!("group {group} has no offsets on any broker").into());
    }
    if !json {
        println!(
            "{:<40}  {:<22}  {:<4}  {:<16}  {:<16}  {:<10}  #LastTime",
            "#Topic", "#Broker Name", "#QID", "#Broker Offset", "#Consumer Offset", "#Diff"
        );
    }
    let mut total = 0;
    for r in &rows {
        total += r.lag();
        if json {
            let doc = serde_json::json!({
                "topic": r.topic, "brokerName": r.broker, "queueId": r.queue_id,
                "brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset,
                "diff": r.lag(), "lastTimestamp": r.last_timestamp,
            });
            println!("{doc}");
        } else {
            let last = if r.last_timestamp == 0 {
                "N/A".to_owned()
            } else {
                r.last_timestamp.to_string()
            };
            println!(
                "{:<40}  {:<22}  {:<4}  {:<16}  {:<16}  {:<10}  {last}",
                r.topic,
                r.broker,
                r.queue_id,
                r.broker_offset,
                r.consumer_offset,
                r.lag()
            );
        }
    }
    if !json {
        println!("\nDiff Total: {total}");
    }
    Ok(())
}

/// `rmq reset-offset`: the offsets the group was moved to, per queue.
pub async fn reset_offset(
    admin: &Admin,
    json: bool,
    group: &str,
    topic: &str,
    to_time: i64,
) -> Res {
    let rows = admin.reset_offset(group, topic, to_time).await?;
    if !json {
        println!("{:<22}  {:<8}  #Offset", "#Broker Name", "#QID");
    }
    for (broker, queue_id, offset) in rows {
        if json {
            let doc = serde_json::json!({
                "topic": topic, "group": group, "brokerName": broker, "queueId": queue_id,
                "offset": offset,
            });
            println!("{doc}");
        } else {
            println!("{broker:<22}  {queue_id:<8}  {offset}");
        }
    }
    Ok(())
}
