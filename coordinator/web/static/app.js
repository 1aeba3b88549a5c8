// fleetgate dashboard: one HTML shell, two views chosen by the address.
//   /               every fleet on the Redis, paused ones first (overview.js)
//   /?fleet=NAME    that fleet: banner, holds, pause switch, problem replicas, every replica a
//                   page at a time, history (fleet.js)
// The token lives in this tab's sessionStorage (never localStorage, never a cookie). What a
// view shows stays on screen when a fetch fails, greyed out, saying since when and why.
"use strict";

(function () {
  const FG = window.FG;
  const { $ } = FG;

  function init() {
    const params = new URLSearchParams(window.location.search);
    const name = params.get("fleet");
    let view = FG.overview;
    if (name !== null) {
      view = FG.fleet;
      document.body.dataset.view = "fleet";
      $("fleet-view").hidden = false;
      $("all-fleets").hidden = false;
    } else {
      document.body.dataset.view = "overview";
      $("overview-view").hidden = false;
    }

    $("token").value = FG.token();
    const keep = () => FG.setToken($("token").value.trim());
    $("token").addEventListener("change", keep);
    $("token").addEventListener("input", keep);
    $("forget").addEventListener("click", () => {
      FG.setToken("");
      $("token").value = "";
      const message = $("message");
      if (view === FG.fleet) { message.textContent = "Token forgotten."; message.dataset.kind = "info"; }
      view.staleAll("no token");
    });

    if (view === FG.fleet && !FG.FLEET_NAME_RE.test(name)) {
      $("fleet-name").textContent = name.slice(0, 80);
      FG.setConnection("error", "not a fleet name: it must match [a-z0-9][a-z0-9_.-]{0,62}");
      return;
    }
    if (view === FG.fleet) view.start(name); else view.start();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
