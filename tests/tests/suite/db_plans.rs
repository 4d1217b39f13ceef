//! The panel's reads stay index-served on a large ledger: on a table of 1,000,000 analysed runs (40 workers, a
//! year of request times, most finished, some retried or resumed, one in ten with progress history), the plan of
//! every panel read (the worker view, the runs list's first page, filtered pages and a deep cursor page, a run's
//! detail, the runs list of one tag, common or rare, alone and with the other filters) and of the claim reads
//! `worker_runs`, `run_progress` and `run_tags` through an index, never a sequential scan, and
//! never a whole non-partial index (an index walked without a condition is the same scan in disguise). On
//! PostgreSQL both the custom plan (of the values) and the generic plan (which a prepared statement switches to
//! after its fifth run) are checked; on SQLite the plan of `EXPLAIN QUERY PLAN`. The claim reaches the queued
//! rows through an index of queued rows alone, without touching history. The statements are the very ones the code runs
//! (`scrinalia_db::Database::explain_panel_reads`), so a later change that turns one into a scan fails here, naming it.

use std::time::Instant;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use scrinalia_db::Database;
use scrinalia_shared::{
    ExplainedRead, PlanSample, Resolved, ResolvedConfig, RunState, Source,
    config::DatabaseSettings,
    runs::{Cursor, RunFilter},
};
use scrinalia_tests::{Kind, TestDb, backend_tests};
use serde_json::Value;
use sqlx::{Connection as _, PgConnection, SqliteConnection};
use uuid::Uuid;

backend_tests!(every_panel_read_and_the_claim_are_index_served_on_a_million_analysed_runs);

/// Runs in the seeded ledger.
const ROWS: i64 = 1_000_000;
/// The tables that grow with history.
const LEDGER: [&str; 3] = ["worker_runs", "run_progress", "run_tags"];
/// The partial indexes of the hot rows (queued, running): walking one whole reads no history.
const HOT: [&str; 4] =
    ["worker_runs_one_in_flight", "worker_runs_queued", "worker_runs_queued_by_priority", "worker_runs_running_lease"];
/// The indexes that reach the queued rows alone: their partial index, or the state's index (whose leading column
/// the claim's `state = 'queued'` fixes).
const QUEUED: [&str; 3] = ["worker_runs_queued", "worker_runs_queued_by_priority", "worker_runs_state_ledger"];

/// The state of run `i` of the seed: 20 queued and 20 running (one per worker, as the in-flight index allows),
/// then 80 % succeeded, 10 % failed, 5 % cancelled, 5 % interrupted, each worker having runs of every state.
const STATE: &str = "case when i <= 20 then 'queued' when i <= 40 then 'running' \
    when (i / 40) % 20 < 16 then 'succeeded' when (i / 40) % 20 < 18 then 'failed' \
    when (i / 40) % 20 = 18 then 'cancelled' else 'interrupted' end";

/// The tags of run `i` of the seed (a JSON list): one run in three carries `kind:letters` and one of 50
/// collections; about one in ten thousand carries `rare` instead.
const TAGS: &str = "case when i % 10007 = 0 then '[\"rare\"]' \
    when i % 3 = 0 then '[\"kind:letters\", \"collection:c-' || (i % 50) || '\"]' else '[]' end";

/// The configuration every seeded run carries: about the size of a real resolved one.
fn config() -> String {
    let resolved = |value: &str, source| Resolved { value: value.to_owned(), source };
    let config = ResolvedConfig {
        engine: Some(resolved("ollama", Source::Default)),
        preset: Some(resolved("fast", Source::Override)),
        model: Some("small:1b".into()),
        endpoint: Some("http://127.0.0.1:11434".into()),
        options: [
            ("batch_size".to_owned(), Resolved { value: serde_json::json!(50), source: Source::Default }),
            ("language".to_owned(), Resolved { value: serde_json::json!("en"), source: Source::Explicit }),
        ]
        .into(),
        timeout_seconds: 600,
        ..ResolvedConfig::empty()
    };
    serde_json::to_string(&config).expect("a configuration").replace('\'', "''")
}

/// PostgreSQL: one `insert … select … from generate_series`, triggers off (no million notifications), ids
/// `md5(i)` so that retries and resumes can name older runs.
fn postgres_seed() -> String {
    let config = config();
    format!(
        "set session_replication_role = replica;
        insert into worker_runs (id, worker, state, end_reason, requested_by, requested_at, arguments, config,
            claimed_by, claimed_at, lease_expires_at, started_at, finished_at, duration_ms, exit_code, error, result,
            log_key, attempt, retry_of, follows, follows_as, tags)
        select md5(i::text)::uuid, 'w-' || (i % 40), s.state,
            case s.state when 'queued' then null when 'running' then null when 'cancelled' then 'cancelled'
                when 'interrupted' then 'owner_lost' else 'exit_status' end,
            'panel', now() - make_interval(secs => i * 30), '{{}}'::jsonb, '{config}'::jsonb,
            case when s.state <> 'queued' then '00000000-0000-7000-8000-000000000001'::uuid end,
            case when s.state <> 'queued' then now() - make_interval(secs => i * 30 - 1) end,
            case when s.state = 'running' then now() + interval '1 minute' end,
            case when s.state <> 'queued' then now() - make_interval(secs => i * 30 - 1) end,
            case when i > 40 then now() - make_interval(secs => i * 30 - 20) end,
            case when i > 40 then 19000 end,
            case when s.state = 'succeeded' then 0 when s.state = 'failed' then 1 end,
            case when s.state = 'failed' then 'exit status 1: the model server refused the batch' end,
            case when i > 40 then '{{\"processed\": 10, \"failed\": 0}}'::jsonb end,
            'runs/w-' || (i % 40) || '/' || i,
            case when i % 97 = 0 and i > 40 then 2 else 1 end,
            case when i % 97 = 0 and i > 40 then md5((i + 40)::text)::uuid end,
            case when i % 89 = 0 and i > 40 then md5((i + 80)::text)::uuid end,
            case when i % 89 = 0 and i > 40 then 'resume' end,
            ({TAGS})::jsonb
        from generate_series(1, {ROWS}) as i, lateral (select {STATE} as state) as s;
        insert into run_tags (tag, run_requested_at, run_id)
        select t, r.requested_at, r.id from worker_runs r, jsonb_array_elements_text(r.tags) as t
        where r.tags <> '[]'::jsonb;
        insert into run_progress (run_id, seq, at, progress)
        select md5(i::text)::uuid, seq, now() - make_interval(secs => i * 30 - seq), '{{\"done\": 3, \"total\": 10}}'::jsonb
        from generate_series(10, {ROWS}, 10) as i, generate_series(1, 3) as seq;
        set session_replication_role = origin;"
    )
}

/// SQLite: the same ledger from a recursive CTE, in one transaction; ids from `i` (mixed, so that they do not
/// follow the request times).
fn sqlite_seed() -> String {
    let config = config();
    let id = |i: &str| format!("unhex(printf('%08x%08x%016x', ({i} * 2654435761) % 4294967296, {i} % 65536, {i}))");
    let time =
        |offset: &str| format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (i * 30 - {offset}) || ' seconds')");
    format!(
        "begin;
        insert into worker_runs (id, worker, state, end_reason, requested_by, requested_at, arguments, config,
            claimed_by, claimed_at, lease_expires_at, started_at, finished_at, duration_ms, exit_code, error, result,
            log_key, attempt, retry_of, follows, follows_as, tags)
        with recursive n(i) as (select 1 union all select i + 1 from n where i < {ROWS}),
            s(i, state) as (select i, {STATE} from n)
        select {id_i}, 'w-' || (i % 40), state,
            case state when 'queued' then null when 'running' then null when 'cancelled' then 'cancelled'
                when 'interrupted' then 'owner_lost' else 'exit_status' end,
            'panel', {requested}, '{{}}', '{config}',
            case when state <> 'queued' then unhex('00000000000070008000000000000001') end,
            case when state <> 'queued' then {t1} end,
            case when state = 'running' then strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+60 seconds') end,
            case when state <> 'queued' then {t1} end,
            case when i > 40 then {t20} end,
            case when i > 40 then 19000 end,
            case when state = 'succeeded' then 0 when state = 'failed' then 1 end,
            case when state = 'failed' then 'exit status 1: the model server refused the batch' end,
            case when i > 40 then '{{\"processed\": 10, \"failed\": 0}}' end,
            'runs/w-' || (i % 40) || '/' || i,
            case when i % 97 = 0 and i > 40 then 2 else 1 end,
            case when i % 97 = 0 and i > 40 then {id_retry} end,
            case when i % 89 = 0 and i > 40 then {id_follow} end,
            case when i % 89 = 0 and i > 40 then 'resume' end,
            {TAGS}
        from s;
        insert into run_progress (run_id, seq, at, progress)
        with recursive n(i) as (select 10 union all select i + 10 from n where i + 10 <= {ROWS}),
            q(seq) as (values (1), (2), (3))
        select {id_i}, seq, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-' || (i * 30 - seq) || ' seconds'),
            '{{\"done\": 3, \"total\": 10}}'
        from n, q;
        commit;
        analyze;",
        id_i = id("i"),
        id_retry = id("(i + 40)"),
        id_follow = id("(i + 80)"),
        requested = time("0"),
        t1 = time("1"),
        t20 = time("20"),
    )
}

/// The id and request time of seeded run `i`.
async fn seeded_run(t: &TestDb, i: i64) -> (Uuid, DateTime<Utc>) {
    match t.kind {
        Kind::Postgres => {
            let mut conn = PgConnection::connect(&t.url).await.expect("a connection");
            sqlx::query_as("select id, requested_at from worker_runs where id = md5($1::text)::uuid")
                .bind(i.to_string())
                .fetch_one(&mut conn)
                .await
                .expect("the seeded run")
        }
        Kind::Sqlite => {
            let mut conn = SqliteConnection::connect(&t.url).await.expect("a connection");
            let (id, at): (Uuid, String) = sqlx::query_as(
                "select id, requested_at from worker_runs \
                 where id = unhex(printf('%08x%08x%016x', ($1 * 2654435761) % 4294967296, $1 % 65536, $1))",
            )
            .bind(i)
            .fetch_one(&mut conn)
            .await
            .expect("the seeded run");
            (id, DateTime::parse_from_rfc3339(&at).expect("a time").with_timezone(&Utc))
        }
    }
}

/// Every node of a PostgreSQL plan tree.
fn nodes(plan: &Value) -> Vec<&Value> {
    let mut out = vec![plan];
    for child in plan.get("Plans").and_then(Value::as_array).into_iter().flatten() {
        out.extend(nodes(child));
    }
    out
}

/// Why a plan reads history without an index, if it does: one sentence per offending step.
fn full_scans(read: &ExplainedRead, kind: &str, plan: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if kind == "sqlite" {
        for line in plan.as_array().into_iter().flatten().filter_map(Value::as_str) {
            let mut words = line.split_whitespace();
            let (Some("SCAN"), Some(table)) = (words.next(), words.next()) else { continue };
            // Aliases of the ledger tables in the statements: `r`, `p`.
            if !(LEDGER.contains(&table) || table == "r" || table == "p") {
                continue;
            }
            let hot = HOT.iter().any(|index| line.contains(&format!("INDEX {index}")));
            if !hot {
                found.push(format!("`{line}`"));
            }
        }
        return found;
    }
    let root = plan.get(0).and_then(|p| p.get("Plan")).unwrap_or(plan);
    for node in nodes(root) {
        let relation = node.get("Relation Name").and_then(Value::as_str).unwrap_or_default();
        if !LEDGER.contains(&relation) {
            continue;
        }
        let kind_of = node["Node Type"].as_str().unwrap_or_default();
        let index = node.get("Index Name").and_then(Value::as_str).unwrap_or_default();
        match kind_of {
            "Seq Scan" => found.push(format!("a Seq Scan on {relation}")),
            "Index Scan" | "Index Only Scan" | "Bitmap Index Scan"
                if node.get("Index Cond").is_none() && !HOT.contains(&index) =>
            {
                found.push(format!("the whole index {index} of {relation}, with no condition"));
            }
            _ => {}
        }
    }
    let _ = read;
    found
}

/// The equalities of a runs list's filter (`worker = $1`, `state = $2`) that its plan checks row by row instead of
/// seeking them in the index, one sentence each. An index that serves only part of the filter still passes
/// `full_scans`, yet visits every run the other part drops: a worker's index alone read ten times the page for
/// one worker's failed runs at ten million runs.
fn filtered_equalities(read: &ExplainedRead, kind: &str, plan: &Value) -> Vec<String> {
    let columns: Vec<&str> = [("worker", "worker = $1 and"), ("state", "state = $2 and"), ("tag", "tag = $12 and")]
        .iter()
        .filter(|(_, eq)| read.sql.contains(eq))
        .map(|(c, _)| *c)
        .collect();
    if !read.name.starts_with("runs list") || columns.is_empty() {
        return Vec::new();
    }
    let conditions: Vec<String> = if kind == "sqlite" {
        plan.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|l| l.starts_with("SEARCH worker_runs") || l.starts_with("SEARCH run_tags"))
            .map(|l| l.split_once(" (").map_or("", |(_, c)| c).replace(' ', ""))
            .collect()
    } else {
        let root = plan.get(0).and_then(|p| p.get("Plan")).unwrap_or(plan);
        // Index and bitmap index scans alike name their index (a bitmap index scan names no relation).
        nodes(root)
            .into_iter()
            .filter(|n| {
                n.get("Index Name")
                    .and_then(Value::as_str)
                    .is_some_and(|i| i.starts_with("worker_runs") || i.starts_with("run_tags"))
            })
            .map(|n| n.get("Index Cond").and_then(Value::as_str).unwrap_or_default().replace(' ', ""))
            .collect()
    };
    let sought = |column: &str| {
        let (sqlite, postgres) = (format!("{column}=?"), format!("({column}="));
        conditions.iter().any(|c| c.contains(&sqlite) || c.contains(&postgres))
    };
    columns
        .into_iter()
        .filter(|c| !sought(c))
        .map(|c| format!("`{c}` is filtered row by row, not sought in an index"))
        .collect()
}

/// The names of the indexes a plan reads.
fn indexes_of(kind: &str, plan: &Value) -> Vec<String> {
    if kind == "sqlite" {
        return plan
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(|l| l.split(" INDEX ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next().map(str::to_owned))
            .collect();
    }
    let root = plan.get(0).and_then(|p| p.get("Plan")).unwrap_or(plan);
    nodes(root).iter().filter_map(|n| n.get("Index Name").and_then(Value::as_str).map(str::to_owned)).collect()
}

async fn every_panel_read_and_the_claim_are_index_served_on_a_million_analysed_runs(t: &TestDb) {
    let started = Instant::now();
    let seed = match t.kind {
        Kind::Postgres => postgres_seed(),
        Kind::Sqlite => sqlite_seed(),
    };
    t.execute(&seed).await.expect("seed the ledger");
    if t.kind == Kind::Postgres {
        // Vacuumed too, as autovacuum keeps a real ledger: its visibility map lets index-only scans skip the heap.
        t.execute("vacuum analyze worker_runs").await.expect("analyse the runs");
        t.execute("vacuum analyze run_progress").await.expect("analyse the progress");
        t.execute("vacuum analyze run_tags").await.expect("analyse the tags");
    }
    eprintln!("{}: seeded {ROWS} runs in {:.1} s", t.kind.name(), started.elapsed().as_secs_f64());

    // A run with progress history that retries an older one (`i % 97 == 0`, `i % 10 == 0`).
    let (run, _) = seeded_run(t, 9_700).await;
    let (deep_id, deep_at) = seeded_run(t, 700_000).await;
    let day = (Utc::now() - TimeDelta::days(100)).duration_trunc(TimeDelta::days(1)).expect("a day");
    let sample = PlanSample {
        worker: "w-7".into(),
        workers: (0..40).map(|w| format!("w-{w}")).collect(),
        state: RunState::Failed,
        day,
        deep: Cursor { requested_at: deep_at, id: deep_id },
        run,
        daemon: Uuid::now_v7(),
        tag: "kind:letters".into(),
        rare_tag: "rare".into(),
    };
    // The plans are of the SQL layer's own statements, which it explains on a pool of its own (no store forwards
    // this: it is the test's question, not a process's).
    let settings = DatabaseSettings { url: t.url.clone(), ..DatabaseSettings::default() };
    let sql = Database::connect(&settings).await.expect("connect");
    let reads = sql.explain_panel_reads(&sample).await.expect("the plans");
    sql.close().await;
    assert!(reads.len() >= 12, "every panel read is explained: {:?}", reads.iter().map(|r| r.name).collect::<Vec<_>>());
    let mut failures = Vec::new();
    for read in &reads {
        for (kind, plan) in &read.plans {
            let mut scans = full_scans(read, kind, plan);
            scans.extend(filtered_equalities(read, kind, plan));
            if !scans.is_empty() {
                failures.push(format!(
                    "{} ({kind} plan) reads history without a fitting index: {}\n  statement: {}\n  plan: {plan:#}",
                    read.name,
                    scans.join("; "),
                    read.sql
                ));
            }
            if read.name.starts_with("claim") && !indexes_of(kind, plan).iter().any(|i| QUEUED.contains(&i.as_str())) {
                failures.push(format!(
                    "{} ({kind} plan) does not reach the queued rows through {QUEUED:?}\n  statement: {}\n  \
                     plan: {plan:#}",
                    read.name, read.sql
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{} plan(s) on {ROWS} analysed runs:\n{}", failures.len(), failures.join("\n"));

    // The pages the plans are of still answer what they say, through the real function.
    let page =
        t.db.api
            .list_runs(&RunFilter {
                worker: Some("w-7".into()),
                state: Some(RunState::Failed),
                from: Some(day),
                to: Some(day + TimeDelta::days(1)),
                limit: 50,
                ..RunFilter::default()
            })
            .await
            .expect("a filtered page");
    assert!(!page.runs.is_empty(), "the seed has failed runs of w-7 on {day}");
    assert!(
        page.runs.iter().all(|r| r.worker == "w-7"
            && r.state == RunState::Failed
            && r.requested_at >= day
            && r.requested_at < day + TimeDelta::days(1)),
        "every run of the page matches its filter"
    );
    let deep =
        t.db.api
            .list_runs(&RunFilter { after: Some(sample.deep), limit: 50, ..RunFilter::default() })
            .await
            .expect("a deep page");
    assert_eq!(deep.runs.len(), 50);
    assert!(
        deep.runs.iter().all(|r| (r.requested_at, r.id) < (deep_at, deep_id)),
        "a deep page holds only runs after its cursor"
    );
    assert!(deep.runs.windows(2).all(|w| (w[0].requested_at, w[0].id) > (w[1].requested_at, w[1].id)), "newest first");
    let first = t.db.api.list_runs(&RunFilter { limit: 50, ..RunFilter::default() }).await.expect("the first page");
    assert_eq!(first.runs.len(), 50);
    assert!(first.next.is_some(), "the first page has a next one");
    // A tag's pages hold its runs only, newest first, down to a deep cursor.
    for (tag, after) in [("rare", None), ("kind:letters", None), ("kind:letters", Some(sample.deep))] {
        let filter = RunFilter { tag: Some(tag.into()), after, limit: 50, ..RunFilter::default() };
        let page = t.db.api.list_runs(&filter).await.expect("a tag's page");
        assert_eq!(page.runs.len(), 50, "{tag}: a full page");
        assert!(page.runs.iter().all(|r| r.tags.iter().any(|t| t == tag)), "{tag}: every run carries it");
        assert!(page.runs.windows(2).all(|w| (w[0].requested_at, w[0].id) > (w[1].requested_at, w[1].id)));
        assert!(after.is_none_or(|c| page.runs.iter().all(|r| (r.requested_at, r.id) < (c.requested_at, c.id))));
    }
    let chain = t.db.api.run_chain(run).await.expect("the chain");
    assert!(chain.len() >= 2 && chain.iter().any(|r| r.id == run), "the retry's chain holds it and what it retries");
    eprintln!(
        "{}: {} statements explained, {:.1} s in all",
        t.kind.name(),
        reads.len(),
        started.elapsed().as_secs_f64()
    );
}
