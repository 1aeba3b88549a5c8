// fleetgate dashboard: one page, vanilla JS, no build step. It polls the JSON API once a
// second with the token from this tab's sessionStorage (never localStorage, never a cookie).
// What it shows stays on screen when a fetch fails (no token, a wrong one, an error), greyed
// out, with since when and why it is stale.
"use strict";

(function () {
  const TOKEN_KEY = "fleetgate.token";
  const POLL_MS = 1000;
  const HISTORY_EVERY = 5; // polls between history refreshes (also refreshed on a new version)
  const PANELS = ["banner", "replicas-panel", "history-panel"];

  const $ = (id) => document.getElementById(id);
  let lastVersion = null;
  let ticks = 0;
  let busy = false;
  const fetchedAt = {}; // panel id -> Date its data was last fetched
  const staleSince = {}; // panel id -> Date its data stopped being current

  // ---------------------------------------------------------------- formatting

  function formatAge(seconds) {
    if (seconds === null || seconds === undefined || !isFinite(seconds) || seconds < 0) return "-";
    if (seconds > 0 && seconds < 1) return seconds.toFixed(1) + "s";
    let s = Math.floor(seconds);
    const days = Math.floor(s / 86400); s -= days * 86400;
    const hours = Math.floor(s / 3600); s -= hours * 3600;
    const minutes = Math.floor(s / 60); s -= minutes * 60;
    const two = (n) => String(n).padStart(2, "0");
    if (days) return days + "d" + two(hours) + "h";
    if (hours) return hours + "h" + two(minutes) + "m";
    if (minutes) return minutes + "m" + two(s) + "s";
    return s + "s";
  }

  function formatLag(seconds) {
    if (seconds === null || !isFinite(seconds)) return "-";
    if (seconds < 0) seconds = 0;
    if (seconds < 1) return Math.round(seconds * 1000) + "ms";
    if (seconds < 10) return seconds.toFixed(1) + "s";
    return formatAge(seconds);
  }

  function parseTime(iso) {
    if (!iso) return null;
    const t = Date.parse(iso);
    return isNaN(t) ? null : t / 1000;
  }

  function secondsBetween(laterIso, earlierIso) {
    const a = parseTime(laterIso);
    const b = parseTime(earlierIso);
    return a === null || b === null ? null : a - b;
  }

  function clock(date) {
    return date.toISOString().slice(11, 19) + " UTC";
  }

  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined || text === "" ? "-" : String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  // ---------------------------------------------------------------- token

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function headers(json) {
    const h = { "Accept": "application/json" };
    if (json) h["Content-Type"] = "application/json";
    const t = token();
    if (t) h["Authorization"] = "Bearer " + t;
    return h;
  }

  function setConnection(state, text) {
    const el = $("connection");
    el.dataset.state = state;
    el.textContent = text;
  }

  function say(text, kind) {
    const el = $("message");
    el.textContent = text;
    el.dataset.kind = kind || "info";
  }

  function detailText(body, status) {
    if (body && typeof body.detail === "string") return body.detail;
    if (body && Array.isArray(body.detail)) {
      return body.detail.map((d) => {
        const where = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
        return (where ? where + ": " : "") + (d.msg || "invalid");
      }).join("; ");
    }
    return "HTTP " + status;
  }

  // ---------------------------------------------------------------- staleness

  function fresh(id) {
    fetchedAt[id] = new Date();
    delete staleSince[id];
    const panel = $(id);
    panel.dataset.stale = "false";
    const note = panel.querySelector(".stale-note");
    note.hidden = true;
    note.textContent = "";
  }

  function stale(id, why) {
    if (!fetchedAt[id]) return; // nothing shown yet: nothing to grey out
    if (!staleSince[id]) staleSince[id] = new Date();
    const panel = $(id);
    panel.dataset.stale = "true";
    const note = panel.querySelector(".stale-note");
    note.hidden = false;
    note.textContent = "Stale since " + clock(staleSince[id]) + " (" + why + "): as fetched at " +
      clock(fetchedAt[id]) + ".";
  }

  function staleAll(why) {
    for (const id of PANELS) stale(id, why);
  }

  // ---------------------------------------------------------------- rendering

  function renderBanner(data) {
    const st = data.state;
    const sum = data.summary;
    const paused = sum.effectively_paused;
    const banner = $("banner");
    banner.dataset.state = paused ? (sum.overdue ? "overdue" : "paused") : "running";
    $("banner-state").textContent = paused ? (sum.overdue ? "PAUSED — OVERDUE" : "PAUSED") : "RUNNING";
    $("banner-reason").textContent = paused ? (st.reason || "-") : "-";
    $("banner-by").textContent = st.by || "-";
    $("banner-since").textContent = st.since || "-";
    $("banner-age").textContent = paused ? formatAge(sum.pause_age_s) : formatAge(secondsBetween(sum.now, st.since));
    $("banner-until").textContent = paused ? (st.expected_until || "no window") + (st.auto_resume_at ? " (auto-resume)" : "") : "-";
    $("banner-version").textContent = String(st.version);
    $("fleet-name").textContent = data.fleet;
    document.title = (paused ? "PAUSED" : "RUNNING") + " · " + data.fleet + " · fleetgate";
    $("summary").textContent =
      sum.replicas + " replicas: " + sum.running + " running, " + sum.paused + " pausing, " +
      sum.quiet + " quiet, " + sum.stale + " stale; " + sum.unacknowledged + " unacknowledged; " +
      sum.in_flight + " in flight, " + sum.queued + " queued";
  }

  function renderReplicas(data) {
    const st = data.state;
    const now = data.summary.now;
    const body = document.querySelector("#replicas tbody");
    const rows = [];
    for (const r of data.replicas) {
      const tr = document.createElement("tr");
      const state = r.stale ? "stale" : r.quiet ? "quiet" : r.paused ? "paused" : "running";
      tr.dataset.replicaId = r.id;
      tr.dataset.state = state;
      tr.className = "state-" + state;
      cell(tr, r.id, "id");
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
      rows.push(tr);
    }
    body.replaceChildren(...rows);
    $("no-replicas").hidden = rows.length > 0;
  }

  function renderHistory(events) {
    const body = document.querySelector("#history tbody");
    const rows = events.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.action = e.action;
      cell(tr, e.at, "at");
      cell(tr, e.action, "action action-" + e.action);
      cell(tr, e.by, "by");
      cell(tr, e.reason, "reason");
      cell(tr, e.version, "num");
      return tr;
    });
    body.replaceChildren(...rows);
  }

  // ---------------------------------------------------------------- polling

  async function getJson(path) {
    const response = await fetch(path, { headers: headers(false), cache: "no-store" });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    return { response, body };
  }

  async function refreshHistory() {
    const { response, body } = await getJson("api/fleet/history?limit=20");
    if (response.ok && body) {
      renderHistory(body.events);
      fresh("history-panel");
    } else {
      stale("history-panel", detailText(body, response.status));
    }
  }

  async function poll() {
    try {
      const { response, body } = await getJson("api/fleet");
      if (response.status === 401 || response.status === 403) {
        setConnection("auth", "enter a token to see the fleet");
        staleAll(token() ? "the token is not valid" : "no token");
      } else if (!response.ok || !body) {
        const detail = detailText(body, response.status);
        setConnection("error", detail);
        staleAll(detail);
      } else {
        setConnection("live", "live");
        renderBanner(body);
        renderReplicas(body);
        fresh("banner");
        fresh("replicas-panel");
        if (body.state.version !== lastVersion || ticks % HISTORY_EVERY === 0) {
          lastVersion = body.state.version;
          await refreshHistory();
        }
      }
    } catch (e) {
      setConnection("error", "coordinator unreachable");
      staleAll("coordinator unreachable");
    }
    ticks += 1;
    setTimeout(poll, POLL_MS);
  }

  // ---------------------------------------------------------------- actions

  // The wait's report, as the CLI prints it: each replica that did not get there and why
  // (unreachable: when it was last heard, what it had in flight then), each one excused (gone).
  function whyNot(r) {
    const why = r.why || "no answer";
    if (why !== "unreachable") return why;
    const items = r.in_flight === null || r.in_flight === undefined ? "in flight unknown" : r.in_flight + " in flight";
    return why + ", last heard " + (r.last_heard || "never") + ", " + items;
  }

  function showWait(wait) {
    const list = $("wait-report");
    const items = [];
    const stragglers = new Set((wait && wait.stragglers) || []);
    for (const r of ((wait && wait.replicas) || []).filter((x) => stragglers.has(x.id))) {
      const li = document.createElement("li");
      li.dataset.kind = "straggler";
      li.dataset.replicaId = r.id;
      li.textContent = r.id + ": " + whyNot(r);
      items.push(li);
    }
    for (const e of (wait && wait.excused) || []) {
      const li = document.createElement("li");
      li.dataset.kind = "excused";
      li.dataset.replicaId = e.id;
      li.textContent = e.id + ": excused, " + e.reason + (e.reason === "gone" ? " (stopped cleanly)" : "");
      items.push(li);
    }
    list.replaceChildren(...items);
    list.hidden = items.length === 0;
  }

  function doneText(body) {
    const s = body.state;
    const wait = body.wait;
    let text = (s.paused ? "Paused" : "Resumed") + " by " + s.by + " (version " + s.version + ")";
    if (!wait) return [text + ".", "ok"];
    const goal = wait.action === "pause" ? "quiet" : "running";
    const n = wait.replicas.length;
    if (wait.ok) return [text + ": " + (n === 1 ? "the replica is " : "all " + n + " replicas are ") + goal + ".", "ok"];
    if (body.detail) return [text + ", but " + body.detail, "warn"];
    return [text + ", but " + wait.stragglers.length + " of " + n + " replicas not " + goal +
      " after " + formatLag(wait.elapsed_s) + ":", "warn"];
  }

  async function post(path, payload) {
    if (busy) return;
    if (!token()) {
      say("Enter the admin token first.", "error");
      $("token").focus();
      return;
    }
    busy = true;
    showWait(null);
    if (payload.wait) say("Waiting up to " + formatAge(payload.timeout) + " for the replicas…", "info");
    try {
      const response = await fetch(path, {
        method: "POST", headers: headers(true), body: JSON.stringify(payload), cache: "no-store",
      });
      let body = null;
      try { body = await response.json(); } catch (e) { body = null; }
      if (response.ok && body) {
        const [text, kind] = doneText(body);
        say(text, kind);
        showWait(body.wait);
        $("reason").value = ""; // said: the next action needs its own
        lastVersion = null;
      } else if (response.status === 401) {
        say("That token is not valid.", "error");
      } else if (response.status === 403) {
        say("That token is read-only: pausing and resuming need the admin token.", "error");
      } else {
        say(detailText(body, response.status), "error");
      }
    } catch (e) {
      say("The coordinator did not answer.", "error");
    } finally {
      busy = false;
    }
  }

  function withWait(payload) {
    const seconds = $("wait").value;
    if (seconds) {
      payload.wait = true;
      payload.timeout = Number(seconds); // bounds the request: the change, then the wait
    }
    return payload;
  }

  function pause() {
    const reason = $("reason").value.trim();
    if (!reason) {
      say("Say why: a reason is required to pause.", "error");
      $("reason").focus();
      return;
    }
    const payload = { reason: reason, auto_resume: $("auto-resume").checked };
    const window = $("for").value;
    if (window) payload.for_seconds = Number(window);
    post("api/fleet/pause", withWait(payload));
  }

  function resume() {
    const payload = {};
    const reason = $("reason").value.trim(); // optional on a resume: for the audit trail
    if (reason) payload.reason = reason;
    const stagger = $("stagger").value;
    if (stagger) payload.stagger_seconds = Number(stagger);
    post("api/fleet/resume", withWait(payload));
  }

  function init() {
    $("token").value = token();
    $("token").addEventListener("change", () => {
      const value = $("token").value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
    });
    $("token").addEventListener("input", () => {
      const value = $("token").value.trim();
      if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
    });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $("token").value = "";
      say("Token forgotten.", "info");
      staleAll("no token");
    });
    $("pause").addEventListener("click", pause);
    $("resume").addEventListener("click", resume);
    $("controls").addEventListener("submit", (e) => e.preventDefault());
    poll();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
