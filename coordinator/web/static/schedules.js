// fleetgate dashboard: a fleet's recurring windows (GET /api/fleets/NAME/schedules), each with
// its occurrence in force or its next one, in the schedule's zone and in UTC. Read once a
// token is there (looked for every SOON_MS) and every SCHEDULES_MS after: not on the poll (a
// schedule changes rarely, and the poll keeps to one request a tick).
"use strict";

window.FG.schedules = (function () {
  const FG = window.FG;
  const { $, cell } = FG;
  const SCHEDULES_MS = 300000;
  const SOON_MS = 2000;

  function span(seconds) {
    let s = Math.floor(Number(seconds) || 0);
    let out = "";
    for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
      if (s >= size) { out += Math.floor(s / size) + unit; s %= size; }
    }
    return out || "0s";
  }

  function local(iso) {
    // "2026-12-06T02:00+01:00" -> "2026-12-06 02:00 (+01:00)"
    const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)(.*)$/.exec(String(iso || ""));
    return m ? m[1] + " " + m[2] + " (" + (m[3] || "UTC") + ")" : String(iso || "-");
  }

  function render(body) {
    const tbody = $("schedules").querySelector("tbody");
    tbody.replaceChildren();
    const list = (body && Array.isArray(body.schedules)) ? body.schedules : [];
    for (const s of list) {
      const tr = document.createElement("tr");
      tr.dataset.schedule = s.name;
      tr.dataset.active = s.active ? "true" : "false";
      const next = Array.isArray(s.next) && s.next.length ? s.next[0] : null;
      cell(tr, s.name, "hold-name");
      cell(tr, s.cron + " · " + span(s.duration_s) + " · " + s.timezone);
      cell(tr, s.reason || "-");
      cell(tr, s.by || "-");
      cell(tr, next ? (s.active ? "now, since " : "") + local(next.local_start) : "no more",
        "next-local");
      cell(tr, next ? next.start + " – " + next.end : "-", "next-utc");
      // a canary resume of the occurrence in force: "canary: 1 released (pod-1)"
      const canaries = Array.isArray(s.canaries_in_force)
        ? s.canaries_in_force.filter((c) => typeof c === "string") : [];
      if (s.active && canaries.length) {
        const div = document.createElement("div");
        div.className = "hold-canary";
        div.dataset.canaries = canaries.join(",");
        div.textContent = "canary: " + canaries.length + " released (" + canaries.join(", ") + ")";
        tr.lastChild.appendChild(div);
      }
      tbody.appendChild(tr);
    }
    $("no-schedules").hidden = list.length > 0;
  }

  function start(name) {
    // every SOON_MS until a read succeeds (the token may come later), then every SCHEDULES_MS
    let done = false;
    async function read() {
      setTimeout(read, done ? SCHEDULES_MS : SOON_MS);
      if (!FG.token()) return;
      try {
        const { response, body } = await FG.getJson(
          "api/fleets/" + encodeURIComponent(name) + "/schedules");
        if (response.ok) { render(body); done = true; }
      } catch (e) { /* the poll says the coordinator is unreachable */ }
    }
    read();
  }

  return { render, start, span };
})();

document.addEventListener("DOMContentLoaded", () => {
  const name = new URLSearchParams(window.location.search).get("fleet");
  if (name !== null && window.FG.FLEET_NAME_RE.test(name)) window.FG.schedules.start(name);
});
