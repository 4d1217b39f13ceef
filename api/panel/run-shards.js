// The shards of a sharded run: on a parent's page, one row per child (its shard, its state, the daemon running
// it, a bar of its last progress, and a link to it), each shard's retries after it; on a child's page, which shard of which run it is.

import { h } from "./dom.js";
import { progressBar, progressFacts, progressText, shortId, stateBadge } from "./format.js";

/** The shards section of run `r` at server time `now`, or nothing for a run that is not sharded. */
export function shardsSection(r, now) {
  if (r.parent_id != null && r.shard != null) {
    return h("p", { class: "shard-of", id: "run-shard-of" }, `Shard ${r.shard} of ${r.shards}, of run `,
      h("a", { href: `#/runs/${r.parent_id}` }, shortId(r.parent_id)), ".");
  }
  const children = r.children ?? [];
  if (!children.length) return null;
  const row = (c) => {
    const f = progressFacts(c, now);
    const retry = c.attempt > 1 ? ` (attempt ${c.attempt})` : "";
    return h("li", { class: "shard", dataset: { shard: c.shard, state: c.state } },
      h("a", { href: `#/runs/${c.id}` }, `Shard ${c.shard}${retry}`), " ", stateBadge(c.state),
      c.daemon_id ? [" on daemon ", shortId(c.daemon_id)] : null, " ",
      c.progress || c.state === "running"
        ? [progressBar(f, `Progress of shard ${c.shard}`), h("span", { class: "progress-text" }, progressText(f))]
        : null);
  };
  return [h("h3", null, `Shards (${r.shards})`), h("ol", { class: "shards", id: "run-shards" }, children.map(row))];
}
