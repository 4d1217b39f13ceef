//! Pipelines, the domain: starting a pipeline run (every step's configuration resolved at once, as a run's is
//! when it is requested; one run in flight per pipeline, enforced by the database), reading them with their
//! steps' runs, cancelling one, and settling those whose current step waits for a busy worker. What a pipeline
//! run does next is one rule, in `advance`.

use serde_json::Value;
use uuid::Uuid;

use crate::{
    Catalogue, DbError, ExplicitArgs, PipelineRun, PipelineRunView, PipelineView, ResolvedConfig, Store,
    catalogue::PipelineSpec,
    db::{self, pipelines::NewPipelineRun},
    runs::{RequestError, Resolver},
};

mod advance;

pub(crate) use advance::{advance, insert_and_start};

/// Why a pipeline run could not be started or found; each displays as a sentence for people.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// The catalogue has no such pipeline.
    #[error("There is no pipeline {0:?}.")]
    UnknownPipeline(String),
    /// No such pipeline run.
    #[error("There is no pipeline run {0}.")]
    NotFound(Uuid),
    /// The pipeline already has a run in flight.
    #[error(
        "Pipeline {pipeline} already has a run in flight (pipeline run {pipeline_run}, at step {step} of {steps}); \
         wait for it to finish or cancel it."
    )]
    InFlight {
        /// The pipeline.
        pipeline: String,
        /// The run in flight.
        pipeline_run: Uuid,
        /// Its step (1-based).
        step: i32,
        /// How many steps it has.
        steps: usize,
    },
    /// The arguments are not an object of step workers.
    #[error("{0}")]
    Arguments(String),
    /// A tag is not a short word, or there are more than ten.
    #[error("{0}")]
    Tags(String),
    /// A step's configuration does not resolve.
    #[error("Step {step} ({worker}) cannot run: {error}")]
    Step {
        /// The step (1-based).
        step: usize,
        /// Its worker.
        worker: String,
        /// Why.
        error: RequestError,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// Every step's configuration, in step order.
pub(crate) struct StepConfigs(pub Vec<ResolvedConfig>);

impl StepConfigs {
    /// Resolves each step of `spec` with its arguments from `arguments` (an object by step worker), against the
    /// overrides and descriptions as they are now.
    pub(crate) async fn resolve(
        store: &Store,
        catalogue: &Catalogue,
        spec: &PipelineSpec,
        arguments: &Value,
    ) -> Result<Self, PipelineError> {
        Self::resolve_with(&store.resolver().await?, catalogue, spec, arguments)
    }

    /// [`StepConfigs::resolve`] against what `resolver` read.
    #[expect(clippy::result_large_err, reason = "the error of `resolve`, made at most once per pipeline start")]
    pub(crate) fn resolve_with(
        resolver: &Resolver,
        catalogue: &Catalogue,
        spec: &PipelineSpec,
        arguments: &Value,
    ) -> Result<Self, PipelineError> {
        let by_worker = match arguments {
            Value::Object(map) => map,
            Value::Null => &serde_json::Map::new(),
            _ => {
                return Err(PipelineError::Arguments(
                    "A pipeline's arguments are an object of step workers, each with its run arguments.".into(),
                ));
            }
        };
        if let Some(stranger) = by_worker.keys().find(|k| !spec.steps.contains(k)) {
            return Err(PipelineError::Arguments(format!(
                "Pipeline {:?} has no step {stranger:?}; its steps are: {}.",
                spec.name,
                spec.steps.join(", ")
            )));
        }
        let mut configs = Vec::with_capacity(spec.steps.len());
        for (i, worker) in spec.steps.iter().enumerate() {
            let step = i + 1;
            let worker_spec = catalogue.worker(worker).ok_or_else(|| PipelineError::Step {
                step,
                worker: worker.clone(),
                error: RequestError::UnknownWorker { worker: worker.clone() },
            })?;
            let args: ExplicitArgs = match by_worker.get(worker) {
                Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
                    PipelineError::Arguments(format!("The arguments of step {step} ({worker}) do not fit: {e}."))
                })?,
                None => ExplicitArgs::default(),
            };
            let config = resolver.resolve(catalogue, worker_spec, &args).map_err(|error| match error {
                RequestError::Database(e) => PipelineError::Database(e),
                error => PipelineError::Step { step, worker: worker.clone(), error },
            })?;
            configs.push(config);
        }
        Ok(Self(configs))
    }
}

impl Store {
    /// Starts a run of `pipeline` for `requested_by`, with `arguments` by step worker, and requests its first
    /// step in the same transaction; every step's run carries the pipeline's tags, then `tags`. Refused with
    /// [`PipelineError::InFlight`] while another run of it is in flight.
    pub(crate) async fn start_pipeline(
        &self,
        catalogue: &Catalogue,
        pipeline: &str,
        requested_by: &str,
        arguments: &Value,
        tags: &[String],
    ) -> Result<PipelineRunView, PipelineError> {
        let spec = catalogue.pipeline(pipeline).ok_or_else(|| PipelineError::UnknownPipeline(pipeline.to_owned()))?;
        let tags = crate::tag::check_tags(tags).map_err(PipelineError::Tags)?;
        let tags = crate::tag::merged(&spec.tags, &tags);
        let configs = StepConfigs::resolve(self, catalogue, spec, arguments).await?;
        let arguments = if arguments.is_null() { Value::Object(Default::default()) } else { arguments.clone() };
        let new = NewPipelineRun {
            id: Uuid::now_v7(),
            pipeline: &spec.name,
            steps: &spec.steps,
            configs: &configs.0,
            arguments: &arguments,
            requested_by,
            fire: None,
            tags: &tags,
        };
        match advance::start(&self.db, &new).await? {
            Some(started) => self.pipeline_view(started).await.map_err(PipelineError::from),
            None => match self.db.retrying(|| db::pipelines::in_flight_of(&self.db, &spec.name)).await? {
                Some(blocking) => Err(PipelineError::InFlight {
                    pipeline: spec.name.clone(),
                    pipeline_run: blocking.id,
                    step: blocking.step + 1,
                    steps: blocking.steps.len(),
                }),
                // It ended in between: a second try finds the way clear, or another in flight.
                None => Box::pin(self.start_pipeline(catalogue, pipeline, requested_by, &arguments, &tags)).await,
            },
        }
    }

    /// The pipeline run with its steps' runs. Its `waiting` needs the catalogue and the live daemons, so it is
    /// left to whoever shows it: [`Store::pipeline_waiting`].
    async fn pipeline_view(&self, pipeline_run: PipelineRun) -> Result<PipelineRunView, DbError> {
        let runs = self.db.retrying(|| db::pipelines::step_runs(&self.db, pipeline_run.id)).await?;
        Ok(PipelineRunView { pipeline_run, runs, waiting: None })
    }

    /// One pipeline run with its steps' runs.
    pub(crate) async fn pipeline_run(&self, id: Uuid) -> Result<Option<PipelineRunView>, DbError> {
        match self.db.retrying(|| db::pipelines::get(&self.db, id)).await? {
            Some(run) => Ok(Some(self.pipeline_view(run).await?)),
            None => Ok(None),
        }
    }

    /// Runs of `pipeline` (of all pipelines when `None`), newest first (1 to 500).
    pub(crate) async fn pipeline_runs(&self, pipeline: Option<&str>, limit: u32) -> Result<Vec<PipelineRun>, DbError> {
        self.db.retrying(|| db::pipelines::list(&self.db, pipeline, limit.clamp(1, 500))).await
    }

    /// The catalogue's pipelines with their last runs.
    pub(crate) async fn pipelines(&self, catalogue: &Catalogue) -> Result<Vec<PipelineView>, DbError> {
        let last = self.db.retrying(|| db::pipelines::last_of_each(&self.db)).await?;
        Ok(catalogue
            .pipelines
            .iter()
            .map(|p| PipelineView {
                name: p.name.clone(),
                description: p.description.clone(),
                steps: p.steps.clone(),
                tags: p.tags.clone(),
                last_run: last.iter().find(|r| r.pipeline == p.name).cloned(),
            })
            .collect())
    }

    /// Asks for a pipeline run to be cancelled by `actor`: its current step is cancelled, and the pipeline run
    /// ends `cancelled` once that step has ended; one that ended already is left as it is. `None` when there is no
    /// such pipeline run.
    pub(crate) async fn cancel_pipeline_run(&self, id: Uuid, actor: &str) -> Result<Option<PipelineRunView>, DbError> {
        advance::cancel(&self.db, id, actor).await?;
        self.pipeline_run(id).await
    }

    /// Moves on every pipeline run whose current step is not in flight (waiting for a busy worker, or left
    /// behind by an end that did not move it); how many were looked at.
    pub(crate) async fn settle_pipelines(&self) -> Result<usize, DbError> {
        let stalled = db::pipelines::stalled(&self.db).await?;
        for id in &stalled {
            advance::settle(&self.db, *id).await?;
        }
        Ok(stalled.len())
    }
}
