//! `scrinalia pipelines …`: the catalogue's pipelines with their last runs, starting a run of one, its runs, one
//! pipeline run with each step's run (state, attempt), and cancelling one.

use anyhow::Context;
use chrono::Utc;
use scrinalia_wire::{PipelineRun, PipelineRunView, PipelineState, PipelineView, Run, StartPipeline, TargetKind};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::{
    args::PipelineCommand,
    client::Client,
    commands::options_once,
    output::{Out, note},
    schedules::apply_options,
    table::{Cell, Style, Table, clip},
    view::{ago, key_lines, outcome, state_style, when},
};

/// Runs `scrinalia pipelines [command]`.
pub async fn run(client: &Client, out: Out, command: Option<PipelineCommand>) -> anyhow::Result<()> {
    match command {
        None => list(client, out).await,
        Some(PipelineCommand::Run { name, options, tags }) => start(client, out, &name, options, tags).await,
        Some(PipelineCommand::Runs { name, limit }) => runs(client, out, &name, limit).await,
        Some(PipelineCommand::Show { id }) => show(client, out, id).await,
        Some(PipelineCommand::Cancel { id }) => cancel(client, out, id).await,
    }
}

/// The colour of a pipeline run's state.
pub fn pipeline_style(state: PipelineState) -> Style {
    match state {
        PipelineState::Running => Style::Busy,
        PipelineState::Succeeded => Style::Good,
        PipelineState::Failed => Style::Bad,
        PipelineState::Cancelled => Style::Dim,
    }
}

/// Where a pipeline run is: `step 2/3 (embed)`.
pub fn step_text(p: &PipelineRun) -> String {
    let index = usize::try_from(p.step).unwrap_or(0);
    let worker = p.steps.get(index).map(String::as_str).unwrap_or("?");
    format!("step {}/{} ({worker})", index + 1, p.steps.len())
}

async fn list(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["pipelines"], &[]).await.context("listing the pipelines")?;
    if out.json {
        return out.body(&body);
    }
    let views: Vec<PipelineView> = body.parse()?;
    if views.is_empty() {
        note("The catalogue has no pipelines ([[pipelines]] in the configuration).");
        return Ok(());
    }
    out.text(&pipelines_table(&views).render(out.colour))
}

/// The table of `scrinalia pipelines`.
pub fn pipelines_table(views: &[PipelineView]) -> Table {
    let now = Utc::now();
    let mut table = Table::new(&["PIPELINE", "STEPS", "LAST RUN", "DESCRIPTION"]);
    for v in views {
        let last = match &v.last_run {
            Some(p) if p.state == PipelineState::Running => {
                Cell::styled(format!("running {} {}", step_text(p), p.id), Style::Busy)
            }
            Some(p) => {
                let at = p.finished_at.unwrap_or(p.requested_at);
                let age = (now - at).num_milliseconds() as f64 / 1000.0;
                Cell::styled(format!("{} {} {}", p.state, ago(age), p.id), pipeline_style(p.state))
            }
            None => Cell::styled("never", Style::Dim),
        };
        table.row(vec![
            v.name.as_str().into(),
            v.steps.join(" → ").into(),
            last,
            clip(v.description.as_deref().unwrap_or_default(), 60).into(),
        ]);
    }
    table
}

async fn start(
    client: &Client,
    out: Out,
    name: &str,
    options: Vec<(String, Value)>,
    tags: Vec<String>,
) -> anyhow::Result<()> {
    let mut arguments = Value::Object(Map::new());
    apply_options(&mut arguments, TargetKind::Pipeline, options_once(options)?, false)?;
    let body = client
        .post(&["pipelines", name, "runs"], Some(&StartPipeline { arguments: Some(arguments), tags }))
        .await
        .with_context(|| format!("starting a run of pipeline {name}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: PipelineRunView = body.parse()?;
    let p = &view.pipeline_run;
    let first = match p.current_run {
        Some(run) => format!("its {} is run {run}", step_text(p)),
        None => format!(
            "its {} waits: {}",
            step_text(p),
            view.waiting.as_ref().map_or("its worker is busy", |w| w.message.trim_end_matches('.'))
        ),
    };
    out.text(&format!(
        "Started pipeline run {} of {}; {first}.\nFollow it with: scrinalia pipelines show {}",
        p.id, p.pipeline, p.id
    ))
}

async fn runs(client: &Client, out: Out, name: &str, limit: Option<u32>) -> anyhow::Result<()> {
    let query: Vec<(&str, String)> = limit.map(|l| ("limit", l.to_string())).into_iter().collect();
    let body = client
        .get(&["pipelines", name, "runs"], &query)
        .await
        .with_context(|| format!("listing the runs of pipeline {name}"))?;
    if out.json {
        return out.body(&body);
    }
    let runs: Vec<PipelineRun> = body.parse()?;
    if runs.is_empty() {
        note(&format!("Pipeline {name} has not run yet. Start it with: scrinalia pipelines run {name}"));
        return Ok(());
    }
    let mut table = Table::new(&["ID", "STATE", "STEP", "REQUESTED", "BY", "FINISHED", "ERROR"]);
    for p in &runs {
        table.row(vec![
            p.id.to_string().into(),
            Cell::styled(p.state.to_string(), pipeline_style(p.state)),
            step_text(p).into(),
            when(p.requested_at).into(),
            p.requested_by.as_str().into(),
            p.finished_at.map(when).unwrap_or_default().into(),
            clip(p.error.as_deref().unwrap_or_default(), 72).into(),
        ]);
    }
    out.text(&table.render(out.colour))
}

async fn show(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let body = client
        .get(&["pipeline-runs", &id.to_string()], &[])
        .await
        .with_context(|| format!("reading pipeline run {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: PipelineRunView = body.parse()?;
    out.text(&pipeline_run_detail(&view, out.colour))
}

/// The runs of step `index` of a pipeline run, oldest first (its retries after it).
fn runs_of_step(runs: &[Run], index: usize) -> Vec<&Run> {
    runs.iter().filter(|r| r.pipeline_step.and_then(|s| usize::try_from(s).ok()) == Some(index)).collect()
}

/// The detail of a pipeline run: its facts, then a table of its steps, each with every run it had.
pub fn pipeline_run_detail(view: &PipelineRunView, colour: bool) -> String {
    let p = &view.pipeline_run;
    let mut lines: Vec<(&str, String)> = vec![
        ("pipeline run", p.id.to_string()),
        ("pipeline", p.pipeline.clone()),
        ("state", pipeline_style(p.state).paint(&p.state.to_string(), colour)),
        ("at", step_text(p)),
        ("requested", format!("{} by {}", when(p.requested_at), p.requested_by)),
    ];
    if let Some(t) = p.finished_at {
        lines.push(("finished", when(t)));
    }
    if let Some(e) = &p.error {
        lines.push(("error", e.clone()));
    }
    if let (Some(s), Some(t)) = (p.schedule_id, p.fire_at) {
        lines.push(("schedule", format!("{s}, the fire of {}", when(t))));
    }
    if let Some(w) = &view.waiting {
        lines.push(("waiting", crate::view::waiting_text(w)));
    }
    if let Some(t) = p.cancel_requested_at {
        lines.push(("cancel", format!("requested {} by {}", when(t), p.cancel_requested_by.as_deref().unwrap_or("?"))));
    }
    let mut table = Table::new(&["STEP", "WORKER", "RUN", "STATE", "ATTEMPT", "OUTCOME"]);
    for (i, worker) in p.steps.iter().enumerate() {
        let step = format!("{}", i + 1);
        let runs = runs_of_step(&view.runs, i);
        if runs.is_empty() {
            let current = usize::try_from(p.step).unwrap_or(0);
            let word = match p.state {
                PipelineState::Running if i == current => "waiting",
                PipelineState::Running if i > current => "pending",
                _ => "not run",
            };
            table.row(vec![step.as_str().into(), worker.as_str().into(), "-".into(), Cell::styled(word, Style::Dim)]);
        }
        for r in runs {
            table.row(vec![
                step.as_str().into(),
                worker.as_str().into(),
                r.id.to_string().into(),
                Cell::styled(r.state.as_str(), state_style(r.state)),
                r.attempt.to_string().into(),
                outcome(r).into(),
            ]);
        }
    }
    format!("{}\n{}", key_lines(&lines), table.render(colour))
}

async fn cancel(client: &Client, out: Out, id: Uuid) -> anyhow::Result<()> {
    let body = client
        .post::<()>(&["pipeline-runs", &id.to_string(), "cancel"], None)
        .await
        .with_context(|| format!("cancelling pipeline run {id}"))?;
    if out.json {
        return out.body(&body);
    }
    let view: PipelineRunView = body.parse()?;
    let p = &view.pipeline_run;
    let text = match p.state {
        PipelineState::Running => format!(
            "Cancellation of pipeline run {id} of {} requested: its {} is cancelled and no further step starts \
             (see: scrinalia pipelines show {id}).",
            p.pipeline,
            step_text(p)
        ),
        PipelineState::Cancelled if p.cancel_requested_at.is_some() => {
            format!("Pipeline run {id} of {} is cancelled.", p.pipeline)
        }
        state => format!("Pipeline run {id} of {} had already ended {state}; nothing to cancel.", p.pipeline),
    };
    out.text(&text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pipeline_run_lists_each_step_with_its_runs() {
        let view: PipelineRunView = serde_json::from_value(json!({
            "id": "0193a000-0000-7000-8000-000000000009", "pipeline": "nightly", "state": "running",
            "steps": ["probe-1", "probe-2"], "step": 1, "current_run": null, "arguments": {},
            "requested_by": "otto", "requested_at": "2026-01-31T10:00:00Z", "finished_at": null, "error": null,
            "schedule_id": null, "fire_at": null, "cancel_requested_at": null, "cancel_requested_by": null,
            "runs": [], "waiting": {"code": "pipeline_step", "runs": ["0193a000-0000-7000-8000-000000000001"],
                "message": "Step 2 (probe-2) waits for worker probe-2's run 0193a000 (running) to end."},
        }))
        .expect("a pipeline run view");
        let text = pipeline_run_detail(&view, false);
        assert!(text.contains("at           step 2/2 (probe-2)"), "{text}");
        assert!(text.contains("waiting      Step 2 (probe-2) waits for worker probe-2's run 0193a000"), "{text}");
        assert!(text.contains("to end. (pipeline_step)"), "the code after the sentence: {text}");
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with('1') || l.starts_with('2')).collect();
        assert!(rows[0].contains("probe-1") && rows[0].contains("not run"), "{rows:?}");
        assert!(rows[1].contains("probe-2") && rows[1].contains("waiting"), "{rows:?}");
    }
}
