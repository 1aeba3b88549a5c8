// fleetgate dashboard: every fleet on the Redis (/). One request a poll tick, GET api/fleets,
// feeds the whole page: a row per fleet (paused, holds, replicas live, stale and
// unacknowledged, backlog, dead letters, pause age, overdue), paused ones first, each leading to its page.
"use strict";

window.FG.overview = (function () {
  const FG = window.FG;
  const { $, cell, formatAge, fresh, stale, setConnection } = FG;

  // Unreadable first, then paused (overdue before), then by name: the API's order, kept if it
  // ever is not.
  function order(rows) {
    return rows.slice().sort((a, b) =>
      (!!b.error - !!a.error) || (!!b.paused - !!a.paused) || (!!b.overdue - !!a.overdue) ||
      (a.fleet < b.fleet ? -1 : a.fleet > b.fleet ? 1 : 0));
  }

  // A fleet the server could not read: its row says so and why, never "running".
  function unreadableRow(f) {
    const tr = document.createElement("tr");
    tr.dataset.fleet = f.fleet;
    tr.dataset.state = "unreadable";
    tr.className = "fleet-row state-unreadable";
    const name = document.createElement("td");
    name.className = "id";
    name.appendChild(fleetLink(f.fleet));
    tr.appendChild(name);
    cell(tr, "UNREADABLE", "fleet-state warn").dataset.state = "unreadable";
    const why = cell(tr, f.error, "reason warn");
    why.colSpan = 10;
    return tr;
  }

  function fleetLink(name) {
    const a = document.createElement("a");
    a.setAttribute("href", "?fleet=" + encodeURIComponent(name));
    a.className = "fleet-link";
    a.textContent = name;
    a.setAttribute("aria-label", "fleet " + name);
    return a;
  }

  function render(body) {
    const rows = order(Array.isArray(body.fleets) ? body.fleets : []);
    const trs = rows.map((f) => {
      if (f.error) return unreadableRow(f);
      const tr = document.createElement("tr");
      const state = f.paused ? (f.overdue ? "overdue" : "paused") : "running";
      tr.dataset.fleet = f.fleet;
      tr.dataset.state = state;
      tr.className = "fleet-row state-" + state;
      const name = document.createElement("td");
      name.className = "id";
      name.appendChild(fleetLink(f.fleet));
      tr.appendChild(name);
      const st = cell(tr, state === "overdue" ? "PAUSED" : state.toUpperCase(), "fleet-state");
      st.dataset.state = state;
      cell(tr, FG.holds.summaryText(f.holds, body.now), "holds");
      cell(tr, f.live, "num live");
      const staleCell = cell(tr, f.stale, "num stale");
      if (f.stale) staleCell.classList.add("warn");
      const unacked = cell(tr, f.unacknowledged, "num unacked");
      if (f.unacknowledged) unacked.classList.add("warn");
      // the work stream: entries waiting (null: Redis cannot say), growing while the fleet is held
      const backlog = cell(tr, f.backlog === null || f.backlog === undefined ? "?" : f.backlog, "num backlog");
      if (f.paused && f.backlog) backlog.classList.add("warn");
      const dead = cell(tr, f.dead_letters === null || f.dead_letters === undefined ? "?" : f.dead_letters, "num dead");
      if (f.dead_letters) dead.classList.add("warn");
      cell(tr, f.paused ? formatAge(f.pause_age_s) : "", "age");
      const overdue = cell(tr, f.overdue ? "OVERDUE" : "no", "overdue");
      if (f.overdue) overdue.classList.add("warn");
      cell(tr, f.paused ? f.reason : "", "reason");
      cell(tr, f.by, "by");
      // the whole row leads to the fleet's page; the name is the link for keyboards
      tr.addEventListener("click", (e) => {
        if (e.target.closest("a")) return;
        window.location.search = "?fleet=" + encodeURIComponent(f.fleet);
      });
      return tr;
    });
    document.querySelector("#fleets tbody").replaceChildren(...trs);
    $("no-fleets").hidden = trs.length > 0;
    const paused = rows.filter((f) => !f.error && f.paused).length;
    const overdue = rows.filter((f) => !f.error && f.overdue).length;
    const unreadable = rows.filter((f) => f.error).length;
    $("fleets-summary").textContent = rows.length + (rows.length === 1 ? " fleet: " : " fleets: ") +
      paused + " paused" + (overdue ? " (" + overdue + " overdue)" : "") + ", " +
      (rows.length - paused - unreadable) + " running" +
      (unreadable ? ", " + unreadable + " cannot be read" : "");
    const truncated = $("fleets-truncated");
    truncated.hidden = !body.truncated;
    truncated.textContent = body.truncated ? "Only the fleets with the latest activity are listed." : "";
    document.title = (paused ? paused + " paused · " : "") + "fleets · fleetgate";
  }

  // Every TIMELINE_EVERY ticks, the tick fetches the timelines instead (and the next tick
  // follows at once): still one request a tick, and the table first after that.
  const TIMELINE_EVERY = 30;
  let timelineIn = 0;

  async function timelines() {
    const { response, body } = await FG.getJson("api/timeline?hours=24&days=7");
    if (!response.ok || !body) {
      stale("timelines-panel", FG.failure(response, body)[1]);
      timelineIn = 0; // again at the next turn
      return true;
    }
    FG.timeline.renderAll($("timelines"), body);
    fresh("timelines-panel");
    return true;
  }

  async function step() {
    if (timelineIn <= 0 && FG.token()) {
      timelineIn = TIMELINE_EVERY;
      return timelines();
    }
    timelineIn -= 1;
    const { response, body } = await FG.getJson("api/fleets");
    if (!response.ok || !body) {
      const [state, why] = FG.failure(response, body);
      setConnection(state, state === "auth" && why === "no token" ? "enter a token to see the fleets" : why);
      stale("fleets-panel", why);
      stale("timelines-panel", why);
      timelineIn = 0;
      return false;
    }
    setConnection("live", "live");
    render(body);
    fresh("fleets-panel");
  }

  // The coordinator's default fleet (FLEETGATE_FLEET), from /healthz once: listed or not yet,
  // its page is a click away.
  async function showDefault() {
    try {
      const { response, body } = await FG.getJson("healthz");
      if (!response.ok || !body || typeof body.fleet !== "string" || !FG.FLEET_NAME_RE.test(body.fleet)) return;
      const p = $("default-fleet");
      p.replaceChildren(document.createTextNode("This coordinator's default fleet: "), fleetLink(body.fleet));
      p.hidden = false;
    } catch (e) {
      // the poll says what is wrong
    }
  }

  function start() {
    showDefault();
    FG.poller(step, (why) => { stale("fleets-panel", why); stale("timelines-panel", why); timelineIn = 0; }).start();
  }

  return { start, staleAll: (why) => { stale("fleets-panel", why); stale("timelines-panel", why); } };
})();
