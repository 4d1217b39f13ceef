//! A large ledger for the benches that need history: `generate_series` statements of a million runs each (no
//! COPY, no client round trip per row), with the runs' triggers off (a million notifications per statement would
//! flood every listener of the server), then `VACUUM ANALYZE`, as autovacuum keeps a real ledger, and a checkpoint.
//!
//! The spread: runs of `probe-1` … `probe-<workers>` in turn, one every `spacing` seconds back from `end_ago`
//! seconds ago (so ten million runs cover a year at 3 s); 80 % succeeded, 10 % failed, 5 % cancelled, 5 %
//! interrupted, every worker having runs of every state; one run in 97 a retry of an older one, one in 89 a
//! resume; one in 100 with three progress reports. Run `i`'s id is `md5(i)`, so that a bench can name one.

use std::time::Instant;

use sqlx::{Connection as _, Executor as _, PgConnection};

/// What to seed.
#[derive(Debug, Clone, Copy)]
pub struct History {
    /// Runs.
    pub rows: u64,
    /// Workers `probe-1` … `probe-<workers>`.
    pub workers: usize,
    /// Seconds between two runs' request times.
    pub spacing: f64,
    /// How long ago the newest run was requested, in seconds.
    pub end_ago: f64,
}

/// Runs per statement: a transaction of its own, so progress is visible and no transaction grows huge.
const CHUNK: u64 = 1_000_000;

/// Seeds `history` into the database at `url`, each run with the configuration `config` (JSON).
pub async fn history(url: &str, config: &serde_json::Value, history: History) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut conn = PgConnection::connect(url).await?;
    conn.execute("set session_replication_role = replica").await?;
    let config = serde_json::to_string(config)?.replace('\'', "''");
    let History { rows, workers, spacing, end_ago } = history;
    let mut from = 1;
    while from <= rows {
        let to = (from + CHUNK - 1).min(rows);
        let at = |offset: i64| format!("now() - make_interval(secs => {end_ago} + i * {spacing} - {offset})");
        let sql = format!(
            "insert into worker_runs (id, worker, state, end_reason, requested_by, requested_at, arguments, config, \
                 claimed_by, claimed_at, started_at, finished_at, duration_ms, exit_code, error, result, log_key, \
                 attempt, retry_of, follows, follows_as) \
             select md5(i::text)::uuid, 'probe-' || (1 + i % {workers}), s.state, \
                 case s.state when 'cancelled' then 'cancelled' when 'interrupted' then 'owner_lost' \
                     else 'exit_status' end, \
                 'history', {requested}, '{{}}'::jsonb, '{config}'::jsonb, \
                 '00000000-0000-7000-8000-000000000001'::uuid, {claimed}, {claimed}, {finished}, 1000, \
                 case when s.state = 'succeeded' then 0 when s.state = 'failed' then 1 end, \
                 case when s.state = 'failed' then 'exit status 1: the model server refused the batch' end, \
                 '{{\"processed\": 10, \"failed\": 0}}'::jsonb, 'runs/probe/' || i, \
                 case when i % 97 = 0 then 2 else 1 end, \
                 case when i % 97 = 0 then md5((i + {workers})::text)::uuid end, \
                 case when i % 89 = 0 then md5((i + 2 * {workers})::text)::uuid end, \
                 case when i % 89 = 0 then 'resume' end \
             from generate_series({from}, {to}) as i, lateral (select case \
                 when (i / {workers}) % 20 < 16 then 'succeeded' when (i / {workers}) % 20 < 18 then 'failed' \
                 when (i / {workers}) % 20 = 18 then 'cancelled' else 'interrupted' end as state) as s",
            requested = at(0),
            claimed = at(1),
            finished = at(2),
        );
        conn.execute(sqlx::AssertSqlSafe(sql)).await?;
        let progress = format!(
            "insert into run_progress (run_id, seq, at, progress) \
             select md5(i::text)::uuid, seq, now() - make_interval(secs => {end_ago} + i * {spacing} - 1), \
                 '{{\"done\": 3, \"total\": 10}}'::jsonb \
             from generate_series({first}, {to}, 100) as i, generate_series(1, 3) as seq",
            first = from.div_ceil(100) * 100,
        );
        conn.execute(sqlx::AssertSqlSafe(progress)).await?;
        eprintln!("seed: {to} of {rows} runs, {:.0} s", started.elapsed().as_secs_f64());
        from = to + 1;
    }
    conn.execute("set session_replication_role = origin").await?;
    conn.execute("vacuum analyze worker_runs").await?;
    conn.execute("vacuum analyze run_progress").await?;
    // Write the seed's gigabytes of dirty pages out now: left to the checkpointer, they are flushed during the
    // first measurement after the seed, which then measures the disk (a 107 ms claim in one pass of
    // claim-history, 1.3 ms in the next).
    conn.execute("checkpoint").await?;
    conn.close().await?;
    eprintln!("seed: {rows} runs seeded and analysed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}
