// fleetgate dashboard, shared parts: formatting, the token, the fetches, staleness and the poll.
// Plain JS, no build step. Everything the API says is put on the page as text (textContent,
// attributes set one by one): reasons, hold and replica names are user input.
"use strict";

window.FG = (function () {
  const TOKEN_KEY = "fleetgate.token";
  const POLL_MS = 1000;
  const FLEET_NAME_RE = /^[a-z0-9][a-z0-9_.-]{0,62}$/;

  const $ = (id) => document.getElementById(id);

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
    if (seconds === null || seconds === undefined || !isFinite(seconds)) return "-";
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

  // A table cell holding `text` as text ("-" when empty).
  function cell(row, text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined || text === "" ? "-" : String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  // ---------------------------------------------------------------- token and fetches

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function setToken(value) {
    if (value) sessionStorage.setItem(TOKEN_KEY, value); else sessionStorage.removeItem(TOKEN_KEY);
  }

  function headers(json) {
    const h = { "Accept": "application/json" };
    if (json) h["Content-Type"] = "application/json";
    const t = token();
    if (t) h["Authorization"] = "Bearer " + t;
    return h;
  }

  async function getJson(path) {
    const response = await fetch(path, { headers: headers(false), cache: "no-store" });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    return { response, body };
  }

  async function postJson(path, payload) {
    const response = await fetch(path, {
      method: "POST", headers: headers(true), body: JSON.stringify(payload), cache: "no-store",
    });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    return { response, body };
  }

  function detailText(body, status) {
    if (body && typeof body.detail === "string") return body.detail;
    if (body && Array.isArray(body.detail)) {
      return body.detail.map((d) => {
        const where = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
        return (where ? where + ": " : "") + (d.msg || "invalid");
      }).join("; ");
    }
    if (body && body.detail && typeof body.detail === "object") {
      return typeof body.detail.message === "string" ? body.detail.message : JSON.stringify(body.detail);
    }
    return "HTTP " + status;
  }

  function setConnection(state, text) {
    const el = $("connection");
    el.dataset.state = state;
    el.textContent = text;
  }

  // What a failed GET means for the page: [connection state, why the data is stale].
  function failure(response, body) {
    if (response.status === 401) {
      return ["auth", token() ? "the token is not valid" : "no token"];
    }
    if (response.status === 403) return ["auth", detailText(body, 403)];
    return ["error", detailText(body, response.status)];
  }

  // ---------------------------------------------------------------- staleness

  const fetchedAt = {}; // panel id -> Date its data was last fetched
  const staleSince = {}; // panel id -> Date its data stopped being current

  function fresh(id) {
    fetchedAt[id] = new Date();
    delete staleSince[id];
    const panel = $(id);
    panel.dataset.stale = "false";
    const note = panel.querySelector(".stale-note");
    note.hidden = true;
    note.textContent = "";
  }

  function anyStale() {
    return Object.keys(staleSince).length > 0;
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

  // ---------------------------------------------------------------- the poll

  // One request a tick: `step` makes exactly one fetch. kick() runs the next tick now (a page
  // of replicas asked for, an action done) instead of adding a request beside the poll; so
  // does a step that returns true (catching up after a failure). The ticks are counted on
  // <body data-polls> so a test can hold requests to ticks.
  function poller(step, unreachable) {
    let timer = null;
    let running = false;
    let again = false;
    let stopped = false;
    async function run() {
      timer = null;
      if (stopped) return;
      if (running) { again = true; return; }
      running = true;
      document.body.dataset.polls = String(Number(document.body.dataset.polls || "0") + 1);
      let soon = false;
      try {
        soon = (await step()) === true;
      } catch (e) { // no answer at all (the fetch itself failed)
        setConnection("error", "coordinator unreachable");
        if (unreachable) unreachable("coordinator unreachable");
      } finally {
        running = false;
      }
      if (again || soon) { again = false; timer = setTimeout(run, 0); return; }
      timer = setTimeout(run, POLL_MS);
    }
    return {
      start: run,
      kick() {
        if (running) { again = true; return; }
        if (timer !== null) clearTimeout(timer);
        timer = setTimeout(run, 0);
      },
      stop() { stopped = true; if (timer !== null) clearTimeout(timer); },
    };
  }

  return {
    FLEET_NAME_RE, $, formatAge, formatLag, parseTime, secondsBetween, clock, cell,
    token, setToken, headers, getJson, postJson, detailText, setConnection, failure,
    fresh, stale, anyStale, poller,
  };
})();
