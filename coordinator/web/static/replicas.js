// fleetgate dashboard: the replicas of one fleet. The replicas that need attention come with
// the summary (GET /api/fleets/NAME: `attention`, at most 20, `attention_total` in all); every
// replica comes a page at a time (GET /api/fleets/NAME?replicas=all&limit=L&cursor=C, where the
// cursor is the last id of the page before: `next_cursor` is null on the last page).
"use strict";

window.FG.replicas = (function () {
  const { $, cell, formatAge, formatLag, secondsBetween } = window.FG;
  const ATTENTION_FALLBACK = 20;

  function stateOf(r) {
    return r.stale ? "stale" : r.quiet ? "quiet" : r.paused ? "paused" : "running";
  }

  // One replica as a table row (every value as text).
  function row(r, st, now, whys) {
    const tr = document.createElement("tr");
    const state = stateOf(r);
    tr.dataset.replicaId = r.id;
    tr.dataset.state = state;
    tr.className = "state-" + state;
    cell(tr, r.id, "id");
    if (whys !== undefined) cell(tr, whys.join(", "), "why");
    const stateCell = cell(tr, state + (r.control === "disconnected" ? " (control lost)" : ""), "state");
    stateCell.dataset.state = state;
    const behind = r.applied_version < st.version;
    const vcell = cell(tr, "v" + r.applied_version + (behind ? " (behind v" + st.version + ")" : " ✓"), "version");
    vcell.dataset.version = String(r.applied_version);
    if (behind && !r.stale) vcell.classList.add("warn");
    cell(tr, r.in_flight, "num in-flight");
    cell(tr, r.queued, "num queued");
    const hb = secondsBetween(now, r.heartbeat_at);
    cell(tr, hb === null ? "-" : formatAge(Math.max(0, Math.floor(hb))) + " ago", "heartbeat").title = r.heartbeat_at || "";
    let lag;
    if (behind) {
      lag = r.stale ? "-" : "waiting " + formatAge(secondsBetween(now, st.changed_at));
    } else {
      lag = formatLag(secondsBetween(r.applied_at, st.changed_at));
    }
    const lagCell = cell(tr, lag, "lag");
    if (behind && !r.stale) lagCell.classList.add("warn");
    cell(tr, r.host, "host");
    tr.appendChild(labelsCell(r.labels));
    return tr;
  }

  // The replica's labels (FLEETGATE_LABELS: what a hold's selector matches), a chip each
  // ("zone=eu-west-1a"), sorted by key; "-" for none (or a record of an older release).
  function labelsCell(labels) {
    const td = document.createElement("td");
    td.className = "labels";
    const keys = labels && typeof labels === "object" ? Object.keys(labels).sort() : [];
    td.dataset.labels = keys.map((k) => k + "=" + labels[k]).join(",");
    if (keys.length === 0) td.textContent = "-";
    for (const k of keys) {
      const chip = document.createElement("span");
      chip.className = "label-chip";
      chip.textContent = k + "=" + labels[k];
      td.appendChild(chip);
    }
    return td;
  }

  // The replicas that need attention, from a summary; a body of the older status shape (every
  // replica, no `attention`) gets the same picked here.
  function attentionOf(body) {
    if (Array.isArray(body.attention)) {
      return { list: body.attention, total: body.attention_total ?? body.attention.length };
    }
    const st = body.state;
    const paused = body.summary.effectively_paused;
    const list = [];
    for (const r of body.replicas || []) {
      const why = [];
      if (r.stale) why.push("stale");
      else {
        if (r.control !== "connected") why.push("control down");
        if (r.applied_version < st.version) why.push("unacknowledged");
        else if (paused && !r.quiet) why.push("not quiet");
        if (!paused && r.paused) why.push("paused while the fleet runs");
      }
      if (why.length) list.push(Object.assign({}, r, { why }));
    }
    return { list: list.slice(0, ATTENTION_FALLBACK), total: list.length };
  }

  // A slow acknowledgement alone is listed (the slowest few) but is no problem: not counted.
  const SLOW = "slow acknowledgement";
  const problem = (r) => (r.why || []).some((w) => w !== SLOW);

  function renderAttention(body) {
    const { list, total } = attentionOf(body);
    const rows = list.map((r) => {
      const tr = row(r, body.state, body.summary.now, r.why || []);
      if (!problem(r)) tr.querySelector("td.why").classList.add("info");
      return tr;
    });
    document.querySelector("#attention tbody").replaceChildren(...rows);
    $("attention").hidden = rows.length === 0;
    const panel = $("attention-panel");
    panel.dataset.count = String(total);
    const problems = list.filter(problem).length;
    let text;
    if (total === 0) {
      text = body.summary.replicas ? "Every replica is where it should be." : "No replica has reported yet.";
      if (rows.length) text += " The slowest acknowledgements of v" + body.state.version + ":";
    } else {
      text = total + (total === 1 ? " replica needs" : " replicas need") + " attention" +
        (total > problems ? " (the " + problems + " most urgent shown)" : "") + ".";
    }
    $("attention-summary").textContent = text;
  }

  // ---------------------------------------------------------------- the paged table

  const pager = {
    cursors: [null], // cursors[i]: the cursor of page i (null: the first)
    index: 0,
    next: null, // the next page's cursor, from the last answer
    total: 0,
    shown: 0,
  };

  function limit() {
    return Number($("page-size").value) || 100;
  }

  function pageQuery() {
    const params = new URLSearchParams({ replicas: "all", limit: String(limit()) });
    const cursor = pager.cursors[pager.index];
    if (cursor !== null) params.set("cursor", cursor);
    return params.toString();
  }

  // A body of the older status shape has every replica and no `next_cursor`: page it here.
  function pageOf(body) {
    if ("next_cursor" in body) return { replicas: body.replicas, next: body.next_cursor };
    const all = (body.replicas || []).slice().sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    const cursor = pager.cursors[pager.index];
    const start = cursor === null ? 0 : all.findIndex((r) => r.id > cursor);
    const from = start < 0 ? all.length : start;
    const chunk = all.slice(from, from + limit());
    return { replicas: chunk, next: from + limit() < all.length && chunk.length ? chunk[chunk.length - 1].id : null };
  }

  // Returns false when the page came back empty past the first (the fleet shrank): the caller
  // asks for the first page then.
  function renderPage(body) {
    const { replicas, next } = pageOf(body);
    if (replicas.length === 0 && pager.index > 0) {
      first();
      return false;
    }
    const rows = replicas.map((r) => row(r, body.state, body.summary.now));
    document.querySelector("#replicas tbody").replaceChildren(...rows);
    pager.next = next;
    pager.total = body.summary.replicas;
    pager.shown = rows.length;
    $("no-replicas").hidden = rows.length > 0;
    showPager();
    return true;
  }

  function showPager() {
    const start = pager.index * limit();
    $("page-info").textContent = pager.shown === 0
      ? "no replica"
      : "replicas " + (start + 1) + "–" + (start + pager.shown) + " of " + pager.total +
        " (page " + (pager.index + 1) + ")";
    $("page-first").disabled = pager.index === 0;
    $("page-prev").disabled = pager.index === 0;
    $("page-next").disabled = pager.next === null;
    $("replicas-panel").dataset.page = String(pager.index + 1);
  }

  function first() {
    pager.cursors = [null];
    pager.index = 0;
    pager.next = null;
  }

  function forward() {
    if (pager.next === null) return false;
    pager.cursors = pager.cursors.slice(0, pager.index + 1);
    pager.cursors.push(pager.next);
    pager.index += 1;
    pager.next = null;
    return true;
  }

  function back() {
    if (pager.index === 0) return false;
    pager.index -= 1;
    pager.next = null;
    return true;
  }

  // A page was asked for: say so until it comes (the rows shown are still the page before).
  function loading() {
    $("page-info").textContent = "loading page " + (pager.index + 1) + "…";
    $("page-first").disabled = true;
    $("page-prev").disabled = true;
    $("page-next").disabled = true;
  }

  return { renderAttention, renderPage, pageQuery, first, forward, back, showPager, loading, stateOf };
})();
