//! The machine the figures come from: CPUs, memory, kernel, load when the bench started, and the PostgreSQL
//! server's version and the settings that decide commit latency.

use serde_json::{Map, Value, json};
use sqlx::{Connection, PgConnection};

use crate::env::Env;

/// A JSON object describing the machine and the database server.
pub async fn describe(env: &Env) -> Value {
    let mut m = Map::new();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    m.insert("nproc".into(), json!(cpus));
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned());
    m.insert("cpu".into(), json!(model.unwrap_or_else(|| "unknown".into())));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(kb) = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
    {
        m.insert("memory".into(), json!(format!("{:.1} GiB", kb / 1024.0 / 1024.0)));
    }
    if let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        m.insert("kernel".into(), json!(release.trim()));
    }
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        m.insert("load at start".into(), json!(load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")));
    }
    match postgres(&env.pg_admin).await {
        Ok(pg) => {
            m.extend(pg);
        }
        Err(e) => {
            m.insert("postgresql".into(), json!(format!("unreachable: {e}")));
        }
    }
    Value::Object(m)
}

/// Adds the load average at the end (figures taken on a busy machine say so).
pub fn finish(machine: &mut Value) {
    if let (Some(m), Ok(load)) = (machine.as_object_mut(), std::fs::read_to_string("/proc/loadavg")) {
        m.insert("load at end".into(), json!(load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")));
    }
}

async fn postgres(url: &str) -> anyhow::Result<Map<String, Value>> {
    let mut conn = PgConnection::connect(url).await?;
    let mut m = Map::new();
    let version: String = sqlx::query_scalar("show server_version").fetch_one(&mut conn).await?;
    m.insert("postgresql".into(), json!(version));
    for setting in ["synchronous_commit", "fsync", "wal_sync_method", "shared_buffers", "max_connections"] {
        let value: String =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("show {setting}"))).fetch_one(&mut conn).await?;
        m.insert(setting.into(), json!(value));
    }
    let _ = conn.close().await;
    Ok(m)
}
