// fleetgate dashboard: one fleet's page (/?fleet=NAME). Each poll tick makes ONE request, in
// turn: the summary (GET api/fleets/NAME: state, counts, the replicas that need attention),
// the shown page of every replica (?replicas=all&limit&cursor), and now and then the history
// (at once after a change). So the page costs the same at 3 replicas as at 5,000.
"use strict";

window.FG.fleet = (function () {
  const FG = window.FG;
  const { $, formatAge, formatLag, secondsBetween, cell, fresh, stale, setConnection } = FG;
  const R = FG.replicas;
  const HISTORY_EVERY = 10; // ticks between history refreshes (and at once after a change)
  const TIMELINE_EVERY = 30; // ticks between timeline refreshes (and at once after a change)
  const TIMELINE_QUERY = "/timeline?hours=24&days=7";
  const PANELS = ["banner", "holds-panel", "timeline-panel", "attention-panel", "replicas-panel",
    "history-panel"];

  let base = "";
  let poll = null;
  let lastKind = null; // what the last tick fetched: summary, page or history
  let lastData = null; // summary or page, whichever came last
  let pageAsked = false; // a page of replicas was asked for (first, previous, next)
  let historyDue = true;
  let historyVersion = null; // the version the history shown was fetched at
  let timelineVersion = null; // the version the timeline shown was fetched at
  let seenVersion = null; // the version the last summary or page said
  let sinceHistory = 0;
  let timelineDue = true;
  let sinceTimeline = 0;
  let busy = false;

  function staleAll(why) {
    for (const id of PANELS) stale(id, why);
  }

  function say(text, kind) {
    const el = $("message");
    el.textContent = text;
    el.dataset.kind = kind || "info";
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
    document.title = (paused ? "PAUSED" : "RUNNING") + " · " + data.fleet + " · fleetgate";
    let text = sum.replicas + " replicas: " + sum.running + " running, " + sum.paused + " pausing, " +
      sum.quiet + " quiet, " + sum.stale + " stale; " + sum.unacknowledged + " unacknowledged; " +
      sum.in_flight + " in flight, " + sum.queued + " queued";
    if (sum.paused_while_running) text += "; " + sum.paused_while_running + " paused while the fleet runs";
    if (Array.isArray(sum.slowest_acks) && sum.slowest_acks.length) {
      const slow = sum.slowest_acks[0];
      text += "; slowest acknowledgement of v" + st.version + ": " + slow.id + " " + formatLag(slow.ack_s);
    }
    text += backlogText(sum);
    $("summary").textContent = text;
    FG.holds.render(data, resumeHold);
    fresh("banner");
    fresh("holds-panel");
    if (st.version !== historyVersion) historyDue = true;
    if (st.version !== timelineVersion) timelineDue = true;
  }

  // The work stream's figures (null: Redis cannot say; absent: an older coordinator).
  function backlogText(sum) {
    if (!("backlog" in sum)) return "";
    const n = (v) => (v === null || v === undefined ? "unknown" : String(v));
    let text = "; backlog " + n(sum.backlog) + " waiting";
    if (sum.backlog && sum.oldest_waiting_s !== null && sum.oldest_waiting_s !== undefined) {
      text += " (oldest " + formatAge(sum.oldest_waiting_s) + ")";
    }
    return text + ", " + n(sum.pending) + " pending, " + n(sum.dead_letters) + " dead letters";
  }

  function renderHistory(events) {
    const rows = events.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.action = e.action;
      cell(tr, e.at, "at");
      cell(tr, e.action, "action action-" + e.action);
      cell(tr, e.hold, "hold");
      cell(tr, e.by, "by");
      cell(tr, e.reason, "reason");
      cell(tr, e.version, "num");
      return tr;
    });
    document.querySelector("#history tbody").replaceChildren(...rows);
  }

  // ---------------------------------------------------------------- the poll: one request a tick

  // summary, page, summary, page, ..., with the history after a page when it is due
  function nextKind() {
    if (pageAsked) return "page";
    if (lastData === null) return "summary";
    if (lastData === "summary") return "page";
    if ((historyDue || sinceHistory >= HISTORY_EVERY) && lastKind !== "history") return "history";
    if ((timelineDue || sinceTimeline >= TIMELINE_EVERY) && lastKind !== "timeline") return "timeline";
    return "summary";
  }

  async function step() {
    const kind = nextKind();
    let path = base;
    if (kind === "page") path = base + "?" + R.pageQuery();
    else if (kind === "history") path = base + "/history?limit=20";
    else if (kind === "timeline") path = base + TIMELINE_QUERY;
    const asked = kind === "page" && pageAsked;
    const { response, body } = await FG.getJson(path);
    lastKind = kind;
    if (kind !== "history" && kind !== "timeline") lastData = kind; // the turn goes on after a failure too
    sinceHistory += 1;
    sinceTimeline += 1;
    if (!response.ok || !body) {
      const [state, why] = FG.failure(response, body);
      const text = state === "auth" && why === "no token" ? "enter a token to see the fleet"
        : response.status === 404 ? why + " (pausing it is allowed: a fleet may be paused before its first replica)"
        : why;
      setConnection(state, text);
      staleAll(response.status === 404 ? "not found" : why);
      historyDue = true; // fetched again once the answers are good
      timelineDue = true;
      return false;
    }
    setConnection("live", "live");
    if (kind === "history") {
      renderHistory(body.events || []);
      historyVersion = seenVersion;
      historyDue = false;
      sinceHistory = 0;
      fresh("history-panel");
      return FG.anyStale(); // back after a failure: catch up on the other panels at once
    }
    if (kind === "timeline") {
      FG.timeline.renderOne($("timeline"), body);
      timelineVersion = seenVersion;
      timelineDue = false;
      sinceTimeline = 0;
      fresh("timeline-panel");
      return FG.anyStale();
    }
    seenVersion = body.state.version;
    renderBanner(body);
    if (kind === "summary") {
      R.renderAttention(body);
      fresh("attention-panel");
    } else {
      if (asked) pageAsked = false;
      if (!R.renderPage(body)) { pageAsked = true; return true; }
      fresh("replicas-panel");
    }
    return FG.anyStale();
  }

  function askPage(move) {
    if (!move()) return;
    pageAsked = true;
    R.loading();
    poll.kick();
  }

  // ---------------------------------------------------------------- actions

  // The wait's report: each replica that did not get there and why, each one excused.
  function whyNot(r) {
    const why = r.why || "no answer";
    if (why !== "unreachable") return why;
    const items = r.in_flight === null || r.in_flight === undefined ? "in flight unknown" : r.in_flight + " in flight";
    return why + ", last heard " + (r.last_heard || "never") + ", " + items;
  }

  function showWait(wait) {
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
    $("wait-report").replaceChildren(...items);
    $("wait-report").hidden = items.length === 0;
  }

  function activeHoldNames(state) {
    return FG.holds.entries(state.holds)
      .filter(([, h]) => FG.holds.statusOf(h, null) === "active").map(([n]) => n);
  }

  // What the change did, from the answer's `change` ({event, holds, paused_by, scheduled}),
  // else from the state after it.
  function changeText(action, body) {
    const s = body.state;
    const c = body.change;
    const v = " (version " + s.version + ")";
    const by = " by " + s.by;
    if (!c) {
      if (action.hold && s.paused) {
        const left = activeHoldNames(s);
        return "Hold " + action.hold + " released" + by + v + "; still paused" + (left.length ? " by " + left.join(", ") : "");
      }
      return (s.paused ? "Paused" : "Resumed") + by + v;
    }
    const names = (c.holds || []).join(", ");
    const plural = (c.holds || []).length > 1 ? "s " : " ";
    const still = c.paused_by && c.paused_by.length ? "; still paused by " + c.paused_by.join(", ") : "; the fleet runs";
    switch (c.event) {
      case "pause": return "Paused" + by + v + (names && names !== "default" ? ": hold " + names : "");
      case "resume": return "Resumed" + by + v;
      case "noop": return "Nothing to resume: the fleet has no hold" + v;
      case "hold_released": return "Hold" + plural + names + " released" + by + v + still;
      case "hold_cancelled": return "Scheduled hold" + plural + names + " cancelled" + by + v + still;
      case "hold_scheduled": {
        const h = (s.holds || {})[names] || {};
        return "Hold " + names + " scheduled for " + (h.starts_at || "later") + by + v;
      }
      case "hold_updated": return "Hold " + names + " updated" + by + v + still;
      default: return "Hold " + names + " added" + by + v + still;
    }
  }

  function doneText(action, body) {
    const text = changeText(action, body);
    const wait = body.wait;
    if (!wait) return [text + ".", "ok"];
    const goal = wait.action === "pause" ? "quiet" : "running";
    const n = wait.replicas.length;
    if (wait.ok) return [text + ": " + (n === 1 ? "the replica is " : "all " + n + " replicas are ") + goal + ".", "ok"];
    if (body.detail) return [text + ", but " + body.detail, "warn"];
    return [text + ", but " + wait.stragglers.length + " of " + n + " replicas not " + goal +
      " after " + formatLag(wait.elapsed_s) + ":", "warn"];
  }

  async function post(what, payload, action) {
    if (busy) return;
    if (!FG.token()) {
      say("Enter the admin token first.", "error");
      $("token").focus();
      return;
    }
    busy = true;
    showWait(null);
    if (payload.wait) say("Waiting up to " + formatAge(payload.timeout) + " for the replicas…", "info");
    try {
      const { response, body } = await FG.postJson(base + "/" + what, payload);
      if (response.ok && body) {
        const [text, kind] = doneText(action, body);
        say(text, kind);
        showWait(body.wait);
        $("reason").value = ""; // said: the next action needs its own
        $("at").value = "";
      } else if (response.status === 401) {
        say("That token is not valid.", "error");
      } else if (response.status === 403) {
        say(FG.token() ? "That token may not do this: " + FG.detailText(body, 403) : "Enter the admin token first.", "error");
      } else if (response.status === 409 && what === "resume") {
        // several holds and no name: nothing changed; say so and offer the explicit choices
        say(FG.detailText(body, 409) + " Nothing changed: resume one hold above, or all of them with “Resume all holds”.", "error");
        $("resume-all-box").hidden = false;
      } else {
        say(FG.detailText(body, response.status), "error");
      }
    } catch (e) {
      say("The coordinator did not answer.", "error");
    } finally {
      busy = false;
      historyDue = true;
      timelineDue = true;
      poll.kick();
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
    const hold = $("hold-name").value.trim();
    if (hold) payload.hold = hold; // without one the API adds or updates the hold "default"
    const at = $("at").value.trim();
    if (at) payload.at = at; // a scheduled hold: an ISO 8601 time or a duration from now
    post("pause", withWait(payload), { pause: true, hold: hold || null });
  }

  function resumePayload() {
    const payload = {};
    const reason = $("reason").value.trim(); // optional on a resume: for the audit trail
    if (reason) payload.reason = reason;
    const stagger = $("stagger").value;
    if (stagger) payload.stagger_seconds = Number(stagger);
    return withWait(payload);
  }

  function resume() {
    post("resume", resumePayload(), { hold: null });
  }

  function resumeHold(name) {
    const payload = resumePayload();
    payload.hold = name;
    post("resume", payload, { hold: name });
  }

  function resumeAll() {
    const payload = resumePayload();
    payload.all = true;
    post("resume", payload, { all: true });
  }

  function start(name) {
    base = "api/fleets/" + encodeURIComponent(name);
    $("fleet-name").textContent = name;
    $("pause").addEventListener("click", pause);
    $("resume").addEventListener("click", resume);
    $("resume-all").addEventListener("click", resumeAll);
    $("controls").addEventListener("submit", (e) => e.preventDefault());
    $("page-first").addEventListener("click", () => askPage(() => { R.first(); return true; }));
    $("page-prev").addEventListener("click", () => askPage(R.back));
    $("page-next").addEventListener("click", () => askPage(R.forward));
    $("page-size").addEventListener("change", () => askPage(() => { R.first(); return true; }));
    R.showPager();
    poll = FG.poller(step, (why) => { staleAll(why); historyDue = true; timelineDue = true; });
    poll.start();
  }

  return { start, staleAll };
})();
