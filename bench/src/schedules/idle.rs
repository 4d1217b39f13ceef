//! The idle part of the schedules bench: two daemons side by side, one with no schedule and one with 1,000 that
//! do not come due, their statements counted from their own logs (and, on PostgreSQL, `pg_stat_database`).

use std::{path::Path, time::Duration};

use anyhow::{Context as _, ensure};
use scrinalia_shared::ScheduleInput;
use scrinalia_testkit::{FreshDb, Kind};
use sqlx::{Connection as _, PgConnection};

use super::{BENCH, Opts, start_daemons};
use crate::{
    env::{ConfigSpec, Env, cpu_time},
    report::{Bound, Figure, number},
};

/// The cron expression of the `i`th idle schedule: once a year, on New Year's day, at a minute of its own.
fn not_due(i: usize) -> String {
    format!("{} {} 1 1 *", i % 60, (i / 60) % 24)
}

pub(super) async fn idle(env: &Env, dbs: [&FreshDb; 2], dirs: [&Path; 2], opts: &Opts) -> anyhow::Result<Vec<Figure>> {
    let backend = dbs[0].kind.name();
    let spec = ConfigSpec { probes: 3, ..ConfigSpec::default() };
    let (config_a, _) = spec.load(env, dbs[0], dirs[0], "bench")?;
    let (config_b, settings) = spec.load(env, dbs[1], dirs[1], "bench")?;
    let b = &dbs[1].db;
    eprintln!("schedules: {backend}: creating {} schedules that are not due", opts.idle_schedules);
    for i in 0..opts.idle_schedules {
        let input = ScheduleInput {
            name: format!("new-year-{i:04}"),
            worker: Some(format!("probe-{}", i % 3 + 1)),
            cron: not_due(i),
            reason: Some("the bench measures an idle daemon with many schedules".to_owned()),
            ..ScheduleInput::default()
        };
        b.api
            .create_schedule(&settings.catalogue, "bench", &input)
            .await
            .with_context(|| format!("create {}", input.name))?;
    }
    let listed = b.api.schedules().await?;
    let enabled = listed.iter().filter(|s| s.schedule.enabled).count();
    ensure!(enabled == opts.idle_schedules, "{enabled} schedules enabled, not {}", opts.idle_schedules);
    let next_fire = b.daemon.next_due().await?.fire;
    let window = Duration::from_secs(opts.idle_settle + opts.idle_seconds);
    if opts.idle_schedules > 0 {
        let next = next_fire.context("an enabled schedule has a next fire time")?;
        ensure!(next > window * 2, "the first schedule fires in {next:?}, within the window");
    }
    // The bench's own pools close first: a backend reports its counters when it ends, which must not fall into
    // the window, and no connection of the bench's may count.
    for db in dbs {
        db.db.close().await;
    }
    let log = [("RUST_LOG", "info,sqlx::query=debug")];
    let mut daemons =
        [start_daemons(env, dirs[0], &config_a, 1, &log)?, start_daemons(env, dirs[1], &config_b, 1, &log)?]
            .map(|mut v| v.remove(0));
    for daemon in &mut daemons {
        daemon.wait_for("daemon started", Duration::from_secs(60)).await?;
    }
    tokio::time::sleep(Duration::from_secs(opts.idle_settle)).await;
    eprintln!(
        "schedules: {backend}: measuring two idle daemons (0 and {} schedules) for {} s",
        opts.idle_schedules, opts.idle_seconds
    );
    let pg_names: Vec<String> = dbs.iter().filter_map(|d| d.pg_name().map(str::to_owned)).collect();
    let mut admin = match dbs[0].kind {
        Kind::Postgres => Some(PgConnection::connect(&env.pg_admin).await?),
        Kind::Sqlite => None,
    };
    let before_pg = transactions(admin.as_mut(), &pg_names).await?;
    let before: Vec<(Duration, Log)> = daemons
        .iter()
        .map(|d| Ok((cpu_time(d.pid().as_raw())?, Log::of(&d.output()))))
        .collect::<anyhow::Result<_>>()?;
    tokio::time::sleep(Duration::from_secs(opts.idle_seconds)).await;
    let after_pg = transactions(admin.as_mut(), &pg_names).await?;
    if let Some(admin) = admin {
        let _ = admin.close().await;
    }
    let seconds = opts.idle_seconds as f64;
    let mut made = Vec::new();
    for (daemon, (cpu_before, log_before)) in daemons.iter().zip(&before) {
        let cpu = (cpu_time(daemon.pid().as_raw())? - *cpu_before).as_secs_f64() / seconds * 100.0;
        made.push((Log::of(&daemon.output()).minus(log_before), cpu));
    }
    for daemon in daemons {
        daemon.stop(Duration::from_secs(10)).await;
    }
    let labels =
        ["no schedule (A)".to_owned(), format!("{} schedules not due (B)", number(opts.idle_schedules as f64))];
    let mut figures = Vec::new();
    for (i, ((log, cpu), label)) in made.iter().zip(&labels).enumerate() {
        let rate = log.statements as f64 / seconds;
        eprintln!(
            "schedules: {backend}: idle daemon, {label}: {} statements in {seconds} s, CPU {cpu:.2} %",
            log.statements
        );
        let mut figure = Figure::info(
            BENCH,
            backend,
            format!("idle daemon, {label}: queries/s (its statement log)"),
            rate,
            "queries/s",
        )
        .detail(format!(
            "{} statements in {seconds} s, {} of them on `schedules` (and {} `BEGIN`s sqlx does not log) · CPU \
             {cpu:.2} % of one core",
            log.statements, log.on_schedules, log.commits
        ));
        if i == 1 {
            figure = figure.target(Bound::Below(1.0));
            let extra = (log.statements as f64 - made[0].0.statements as f64) / seconds;
            figure.detail = format!("{} · B − A: {} queries/s", figure.detail, number(extra));
        }
        figures.push(figure);
    }
    if let (Some(before), Some(after)) = (before_pg, after_pg) {
        for ((b, a), label) in before.iter().zip(&after).zip(&labels) {
            let xacts = a - b;
            figures.push(
                Figure::info(
                    BENCH,
                    backend,
                    format!("idle daemon, {label}: transactions/s (pg_stat_database xact_commit + xact_rollback)"),
                    xacts as f64 / seconds,
                    "xacts/s",
                )
                .detail(format!("{xacts} in {seconds} s")),
            );
        }
    }
    Ok(figures)
}

/// What a daemon's statement log holds so far.
#[derive(Debug, Clone, Copy, Default)]
struct Log {
    /// Statements sent (sqlx logs each at debug level under `sqlx::query`, with a `summary=` field).
    statements: usize,
    /// Those that name the `schedules` table.
    on_schedules: usize,
    /// `COMMIT`s: each follows a `BEGIN` that sqlx does not log.
    commits: usize,
}

impl Log {
    fn of(text: &str) -> Self {
        let lines = text.lines().filter(|l| l.contains("summary="));
        let (mut statements, mut on_schedules, mut commits) = (0, 0, 0);
        for line in lines {
            statements += 1;
            commits += usize::from(line.contains("summary=\"COMMIT\""));
            if line.contains(" schedules ") || line.contains(" schedules\"") {
                on_schedules += 1;
            }
        }
        Self { statements, on_schedules, commits }
    }

    fn minus(self, before: &Self) -> Self {
        Self {
            statements: self.statements.saturating_sub(before.statements),
            on_schedules: self.on_schedules.saturating_sub(before.on_schedules),
            commits: self.commits.saturating_sub(before.commits),
        }
    }
}

/// `xact_commit + xact_rollback` of each database (PostgreSQL only), from the admin connection's database.
async fn transactions(admin: Option<&mut PgConnection>, databases: &[String]) -> anyhow::Result<Option<Vec<i64>>> {
    let Some(admin) = admin else { return Ok(None) };
    let mut out = Vec::with_capacity(databases.len());
    for database in databases {
        out.push(
            sqlx::query_scalar("select (xact_commit + xact_rollback)::bigint from pg_stat_database where datname = $1")
                .bind(database)
                .fetch_one(&mut *admin)
                .await?,
        );
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_schedules_fire_on_new_years_day_only() {
        assert_eq!(not_due(0), "0 0 1 1 *");
        assert_eq!(not_due(61), "1 1 1 1 *");
        assert_eq!(not_due(999), "39 16 1 1 *");
    }

    #[test]
    fn the_statement_log_is_counted() {
        let text = "x sqlx::query: summary=\"select id from schedules where\" db.statement=\"\"\n\
                    x sqlx::query: summary=\"COMMIT\"\nno statement here\n";
        let log = Log::of(text);
        assert_eq!((log.statements, log.on_schedules, log.commits), (2, 1, 1));
    }
}
