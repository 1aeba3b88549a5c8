// fleetgate dashboard: a fleet's holds (state.holds: an object keyed by hold name, each
// {reason, by, since, expected_until, auto_resume_at, starts_at, status, select, canaries,
// holding}). The fleet is paused
// while any hold is active; a scheduled one starts at its starts_at. Each hold has its own
// resume button (POST .../resume {"hold": NAME}); "Resume all holds" ({"all": true}) is there,
// explicitly, whenever there are several.
"use strict";

window.FG.holds = (function () {
  const { $, cell, parseTime } = window.FG;

  // scheduled, active or ended at `nowIso` (the API's `status` when it sends one).
  function statusOf(hold, nowIso) {
    if (hold && typeof hold.status === "string" && hold.status) return hold.status;
    const now = parseTime(nowIso) ?? Date.now() / 1000;
    const starts = parseTime(hold && hold.starts_at);
    if (starts !== null && now < starts) return "scheduled";
    const ends = parseTime(hold && hold.auto_resume_at);
    if (ends !== null && now >= ends) return "ended";
    return "active";
  }

  // [[name, hold], ...] by name; [] for a state without holds.
  function entries(holds) {
    if (!holds || typeof holds !== "object") return [];
    return Object.keys(holds).sort().map((name) => [name, holds[name] || {}]);
  }

  // The holds, as text for the overview: "db, zone-a [zone=eu-west-1a], payments (scheduled)";
  // a canary resume in progress says so: "v142 [version=1.4.2] (canary: 1 released)".
  function summaryText(holds, nowIso) {
    return entries(holds).map(([name, h]) => [name, h, statusOf(h, nowIso)])
      .filter(([, , status]) => status !== "ended")
      .map(([name, h, status]) => {
        let text = typeof h.select === "string" && h.select ? name + " [" + h.select + "]" : name;
        if (status !== "active") text += " (" + status + ")";
        const n = Array.isArray(h.canaries) ? h.canaries.length : 0;
        if (n) text += " (canary: " + n + " released)";
        return text;
      })
      .join(", ");
  }

  // The replicas a hold is for: its selector ("select zone=eu-west-1a", or every replica), how
  // many live replicas it holds now ("holds 2 of 6 replicas", from the records: `holding`), and a
  // canary resume in progress ("canary: 1 of 4 released (orders-4)": its canaries of the
  // replicas it applies to, those it holds and those it is released on).
  function scopeCell(h, status, live) {
    const td = document.createElement("td");
    td.className = "hold-scope";
    const line = (text, cls) => {
      const div = document.createElement("div");
      div.className = cls;
      div.textContent = text;
      td.appendChild(div);
      return div;
    };
    const select = typeof h.select === "string" && h.select ? h.select : null;
    line(select ? "select " + select : "every replica", "hold-select" + (select ? "" : " muted"))
      .dataset.select = select || "";
    const holding = typeof h.holding === "number" ? h.holding : null;
    if (status === "active" && holding !== null) {
      const of = typeof live === "number" ? " of " + live : "";
      line("holds " + holding + of + (live === 1 ? " replica" : " replicas"), "hold-holding")
        .dataset.holding = String(holding);
    }
    const canaries = Array.isArray(h.canaries) ? h.canaries.filter((c) => typeof c === "string") : [];
    if (canaries.length) {
      const total = holding !== null ? " of " + (holding + canaries.length) : "";
      const div = line("canary: " + canaries.length + total + " released (" + canaries.join(", ") + ")",
        "hold-canary");
      div.dataset.canaries = canaries.join(",");
    }
    return td;
  }

  function until(h) {
    if (h.auto_resume_at) return h.auto_resume_at + " (auto-resume)";
    return h.expected_until || "no window";
  }

  // `onResume(name, status)` is called by a hold's button.
  function render(body, onResume) {
    const st = body.state;
    const now = body.summary.now;
    const list = entries(st.holds);
    const rows = [];
    if (list.length === 0 && st.holds == null && body.summary.effectively_paused) {
      // a pause written without holds (an older release, by hand): one hold, "default"
      list.push(["default", { reason: st.reason, by: st.by, since: st.since,
        expected_until: st.expected_until, auto_resume_at: st.auto_resume_at, legacy: true }]);
    }
    let live = 0;
    for (const [name, h] of list) {
      const status = statusOf(h, now);
      if (status === "ended") continue;
      live += 1;
      const tr = document.createElement("tr");
      tr.dataset.hold = name;
      tr.dataset.status = status;
      cell(tr, name, "hold-name");
      cell(tr, status, "hold-status status-" + status);
      tr.appendChild(scopeCell(h, status, body.summary.live));
      cell(tr, h.reason, "reason");
      cell(tr, h.by, "by");
      cell(tr, status === "scheduled" ? "starts " + (h.starts_at || "-") : h.since, "at");
      cell(tr, until(h), "at");
      const td = document.createElement("td");
      if (!h.legacy) {
        const button = document.createElement("button");
        button.type = "button";
        button.className = "resume hold-resume";
        button.textContent = status === "scheduled" ? "Cancel" : "Resume";
        button.setAttribute("aria-label",
          (status === "scheduled" ? "Cancel scheduled hold " : "Resume hold ") + name);
        button.dataset.hold = name;
        button.addEventListener("click", () => onResume(name, status));
        td.appendChild(button);
      }
      tr.appendChild(td);
      rows.push(tr);
    }
    document.querySelector("#holds tbody").replaceChildren(...rows);
    $("holds").hidden = rows.length === 0;
    $("no-holds").hidden = rows.length > 0;
    $("holds-panel").dataset.count = String(live);
    const several = list.filter(([, h]) => !h.legacy).length >= 2 && live >= 2;
    $("resume-all-box").hidden = !several;
    $("resume-all").textContent = "Resume all " + live + " holds";
    return live;
  }

  return { render, statusOf, summaryText, entries };
})();
