//! `scrinalia resources …`: the catalogue's shared resources with the capacity claims count against now, where it
//! comes from and the runs holding them; changing a capacity as an audited override, back to the catalogue's,
//! and the audit trail of those changes. The API validates (a capacity of 0 is its 400, exit 7).

use anyhow::Context;
use clap::Subcommand;
use scrinalia_wire::{
    Reason, ResourceAudit, ResourceAuditEntry, ResourceChange, ResourceScope, ResourceSource, ResourceView,
    ResourcesView,
};

use crate::{
    args::parse_reason,
    client::Client,
    output::{Out, note},
    table::{Cell, Style, Table, clip},
    view::when,
};

/// `scrinalia resources …`.
#[derive(Debug, Subcommand)]
pub enum ResourceCommand {
    /// Override a resource's capacity: from the next claim on, at most CAPACITY runs hold it at once (runs
    /// already holding it go on).
    Set {
        /// The resource's name.
        name: String,
        /// How many runs may hold it at once.
        capacity: u32,
        /// Why (required; kept in the audit trail).
        #[arg(long, value_name = "REASON", value_parser = parse_reason)]
        reason: Reason,
    },
    /// Remove a resource's capacity override: the catalogue's capacity applies again from the next claim on.
    Reset {
        /// The resource's name.
        name: String,
        /// Why (required; kept in the audit trail).
        #[arg(long, value_name = "REASON", value_parser = parse_reason)]
        reason: Reason,
    },
    /// List a resource's capacity changes, newest first: who changed it, when, from what to what and why.
    Audit {
        /// The resource's name.
        name: String,
        /// At most this many entries.
        #[arg(long, value_name = "N", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
    },
}

/// Runs `scrinalia resources [command]`.
pub async fn run(client: &Client, out: Out, command: Option<ResourceCommand>) -> anyhow::Result<()> {
    match command {
        None => list(client, out).await,
        Some(ResourceCommand::Set { name, capacity, reason }) => {
            change(
                client,
                out,
                &name,
                ResourceChange { capacity: Some(Some(capacity)), reason: Some(reason.to_string()) },
            )
            .await
        }
        Some(ResourceCommand::Reset { name, reason }) => {
            change(client, out, &name, ResourceChange { capacity: Some(None), reason: Some(reason.to_string()) }).await
        }
        Some(ResourceCommand::Audit { name, limit }) => audit(client, out, &name, limit).await,
    }
}

async fn list(client: &Client, out: Out) -> anyhow::Result<()> {
    let body = client.get(&["resources"], &[]).await.context("listing the resources")?;
    if out.json {
        return out.body(&body);
    }
    let view: ResourcesView = body.parse()?;
    if view.resources.is_empty() {
        note("The catalogue has no shared resources ([[resources]] in the configuration).");
        return Ok(());
    }
    out.text(&resources_table(&view.resources).render(out.colour))
}

/// Where a capacity comes from, in words: `catalogue`, `override by ada at …`, or, for a daemon-scoped resource,
/// each live daemon that offers it with its count (`daemons: gpu-1 1, gpu-2 2`).
fn source_text(r: &ResourceView) -> String {
    if r.scope == ResourceScope::Daemon {
        let each: Vec<String> = r.daemons.iter().map(|d| format!("{} {}", d.host, d.capacity)).collect();
        return if each.is_empty() {
            "daemons: none offers it".to_owned()
        } else {
            format!("daemons: {}", each.join(", "))
        };
    }
    match (r.source, &r.updated_by, r.updated_at) {
        (ResourceSource::Override, Some(by), Some(at)) => {
            format!("override by {by} at {} (catalogue: {})", when(at), r.catalogue_capacity)
        }
        (ResourceSource::Override, _, _) => format!("override (catalogue: {})", r.catalogue_capacity),
        (ResourceSource::Default, _, _) => "catalogue".to_owned(),
    }
}

/// The table of `scrinalia resources`: the holders as `held/capacity` and their run ids.
pub fn resources_table(resources: &[ResourceView]) -> Table {
    let mut table = Table::new(&["RESOURCE", "CAPACITY", "HELD", "SOURCE", "HOLDERS", "DESCRIPTION"]);
    for r in resources {
        let held = r.holders.len();
        let style = if held as u64 >= u64::from(r.capacity) { Style::Warn } else { Style::Plain };
        let holders: Vec<String> = r.holders.iter().map(ToString::to_string).collect();
        let source = match r.source {
            ResourceSource::Override => Cell::styled(source_text(r), Style::Busy),
            ResourceSource::Default => Cell::from(source_text(r)),
        };
        table.row(vec![
            r.name.as_str().into(),
            r.capacity.to_string().into(),
            Cell::styled(format!("{held}/{}", r.capacity), style),
            source,
            holders.join(" ").into(),
            clip(r.description.as_deref().unwrap_or_default(), 60).into(),
        ]);
    }
    table
}

async fn change(client: &Client, out: Out, name: &str, body: ResourceChange) -> anyhow::Result<()> {
    let reply = client
        .put(&["resources", name], &body)
        .await
        .with_context(|| format!("changing the capacity of resource {name}"))?;
    if out.json {
        return out.body(&reply);
    }
    let r: ResourceView = reply.parse()?;
    out.text(&changed_text(&r))
}

/// What a change did, in a sentence: the capacity now, where it comes from, and who holds the resource.
pub fn changed_text(r: &ResourceView) -> String {
    let from = match r.source {
        ResourceSource::Override => format!("an override; the catalogue says {}", r.catalogue_capacity),
        ResourceSource::Default => "the catalogue's".to_owned(),
    };
    let held = match r.holders.len() {
        0 => "no run holds it now".to_owned(),
        1 => "1 run holds it now".to_owned(),
        n => format!("{n} runs hold it now"),
    };
    let over = if r.holders.len() as u64 > u64::from(r.capacity) {
        " (they go on; no new run takes it until fewer hold it)"
    } else {
        ""
    };
    format!(
        "Resource {} has capacity {} ({from}) from the next claim on; {held}{over}.\nSee the trail with: scrinalia \
         resources audit {}",
        r.name, r.capacity, r.name
    )
}

async fn audit(client: &Client, out: Out, name: &str, limit: u32) -> anyhow::Result<()> {
    let body = client
        .get(&["resources", name, "audit"], &[("limit", limit.to_string())])
        .await
        .with_context(|| format!("reading the audit trail of resource {name}"))?;
    if out.json {
        return out.body(&body);
    }
    let trail: ResourceAudit = body.parse()?;
    if trail.entries.is_empty() {
        note(&format!("The capacity of {name} was never changed: the catalogue's applies."));
        return Ok(());
    }
    out.text(&audit_table(&trail.entries).render(out.colour))
}

/// A capacity in an audit entry: the overridden number, or `catalogue` when none was set.
fn capacity_text(c: Option<u32>) -> String {
    c.map_or_else(|| "catalogue".to_owned(), |c| c.to_string())
}

/// A resource's audit trail as a table.
pub fn audit_table(entries: &[ResourceAuditEntry]) -> Table {
    let mut table = Table::new(&["WHEN", "WHO", "CHANGE", "REASON"]);
    for a in entries {
        table.row(vec![
            when(a.at).into(),
            a.actor.as_str().into(),
            format!("{} → {}", capacity_text(a.before), capacity_text(a.after)).into(),
            clip(&a.reason, 72).into(),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(source: ResourceSource, capacity: u32, holders: usize) -> ResourceView {
        let overridden = source == ResourceSource::Override;
        ResourceView {
            name: "model-server".into(),
            description: Some("one GPU".into()),
            catalogue_capacity: 1,
            capacity,
            source,
            updated_by: overridden.then(|| "ada".to_owned()),
            updated_at: overridden.then(chrono::Utc::now),
            holders: (0..holders).map(|_| uuid::Uuid::nil()).collect(),
            scope: Default::default(),
            daemons: Vec::new(),
        }
    }

    #[test]
    fn a_daemon_scoped_resource_names_each_daemon_with_its_count() {
        let mut gpu = view(ResourceSource::Default, 3, 0);
        gpu.scope = ResourceScope::Daemon;
        assert_eq!(source_text(&gpu), "daemons: none offers it");
        let on = |host: &str, capacity| scrinalia_wire::ResourceOnDaemon {
            daemon: uuid::Uuid::nil(),
            host: host.into(),
            capacity,
            holders: Vec::new(),
        };
        gpu.daemons = vec![on("gpu-1", 1), on("gpu-2", 2)];
        assert_eq!(source_text(&gpu), "daemons: gpu-1 1, gpu-2 2");
    }

    #[test]
    fn a_change_says_the_capacity_its_source_and_its_holders() {
        let raised = changed_text(&view(ResourceSource::Override, 2, 1));
        assert!(
            raised.starts_with("Resource model-server has capacity 2 (an override; the catalogue says 1)"),
            "{raised}"
        );
        assert!(raised.contains("1 run holds it now."), "{raised}");
        let reset = changed_text(&view(ResourceSource::Default, 1, 2));
        assert!(reset.contains("capacity 1 (the catalogue's)"), "{reset}");
        assert!(reset.contains("2 runs hold it now (they go on;"), "{reset}");
        let table = resources_table(&[view(ResourceSource::Override, 2, 2)]).render(false);
        assert!(table.contains("2/2") && table.contains("override by ada"), "{table}");
    }
}
