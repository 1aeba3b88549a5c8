// fleetgate dashboard: holds on a timeline, drawn as SVG from GET api/fleets/NAME/timeline (one
// fleet) or GET api/timeline (every fleet). The past (the last `hours`, rebuilt from the audit
// trail) fills the left part, the future (the next `days`: planned windows and schedule
// occurrences) the right part, each at its own scale, split by the "now" line. One lane per
// hold; each span a rect with a <title> (who, why, how long); labels, hour ticks and a legend.
// Everything the API says goes in as text (textContent) or as one attribute at a time.
"use strict";

window.FG.timeline = (function () {
  const FG = window.FG;
  const { parseTime, formatAge } = FG;
  const NS = "http://www.w3.org/2000/svg";
  const LABEL_W = 190; // the lane labels
  const LANE_H = 26;
  const AXIS_H = 30;
  const PAST_SHARE = 0.55; // of the drawing width, for the past
  const CHAR_W = 6.6; // an estimate of one character of the 11px labels (generous: no overflow)
  const KINDS = {
    hold: "hold (from the audit trail)",
    window: "one-off window",
    schedule: "schedule occurrence",
  };

  function el(name, attrs, text) {
    const node = document.createElementNS(NS, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function title(node, text) {
    node.appendChild(el("title", {}, text));
    return node;
  }

  function iso(seconds) {
    return new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
  }

  function fit(text, width) {
    const n = Math.floor((width - 8) / CHAR_W);
    if (n < 3) return "";
    return text.length <= n ? text : text.slice(0, n - 1) + "…";
  }

  // The x of a time: the past from `x0` to the now line, the future from there to `x1`.
  function scale(left, now, right, x0, x1) {
    const future = right > now ? 1 - PAST_SHARE : 0;
    const xNow = x0 + (x1 - x0) * (1 - future);
    const x = (t) => {
      if (t <= now) return x0 + Math.max(0, (t - left) / (now - left)) * (xNow - x0);
      return xNow + Math.min(1, (t - now) / (right - now)) * (x1 - xNow);
    };
    return { x, xNow };
  }

  const two = (n) => String(n).padStart(2, "0");
  const DAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

  // Whole UTC hours in the past part (a step that keeps about 8 of them), midnights ahead.
  function ticks(left, now, right) {
    const out = [];
    const hours = (now - left) / 3600;
    const step = [1, 2, 3, 4, 6, 12, 24].find((s) => hours / s <= 9) || 24;
    for (let t = Math.ceil(left / (step * 3600)) * step * 3600; t <= now; t += step * 3600) {
      const d = new Date(t * 1000);
      out.push([t, two(d.getUTCHours()) + ":00", "hour"]);
    }
    const days = (right - now) / 86400;
    const dayStep = days > 14 ? 7 : days > 8 ? 2 : 1;
    for (let t = Math.ceil(now / 86400) * 86400; t <= right; t += dayStep * 86400) {
      const d = new Date(t * 1000);
      out.push([t, DAYS[d.getUTCDay()] + " " + two(d.getUTCDate()), "day"]);
    }
    return out;
  }

  function lanes(spans) {
    const order = [];
    const by = {};
    for (const s of spans) {
      const key = s.hold;
      if (!(key in by)) { by[key] = []; order.push(key); }
      by[key].push(s);
    }
    return order.map((name) => [name, by[name]]);
  }

  function laneLabel(name, spans) {
    const select = spans.map((s) => s.select).find((v) => typeof v === "string" && v);
    return select ? name + " [" + select + "]" : name;
  }

  function tooltip(s, kind, left, now) {
    const lines = [s.hold + " — " + (KINDS[kind] || kind)];
    if (s.reason) lines.push("why: " + s.reason);
    if (s.by) lines.push("by: " + s.by);
    if (s.schedule) lines.push("schedule: " + s.schedule);
    if (s.select) lines.push("replicas: " + s.select);
    if (s.canaries) lines.push("canaries: " + canaryText(s.canaries));
    const from = s.start || "before " + iso(left);
    const to = s.end || (s.until ? "in force, ends by itself at " + s.until : "still in force");
    lines.push("from " + from + " to " + to);
    if (s.duration_s !== null && s.duration_s !== undefined) {
      lines.push((s.end ? "lasted " : "so far ") + formatAge(s.duration_s));
    } else if (s.start === null) {
      lines.push((s.end ? "lasted" : "so far") + " at least " + formatAge((parseTime(s.end) ?? now) - left));
    }
    if (s.ended) lines.push("ended: " + s.ended + (s.ended_by ? " by " + s.ended_by : ""));
    return lines.join("\n");
  }

  function canaryText(c) {
    if (Array.isArray(c)) return c.join(", ");
    if (c && typeof c === "object") {
      const ids = Array.isArray(c.replicas) ? c.replicas.join(", ") : "";
      return [c.phase || c.status || "", ids].filter(Boolean).join(": ");
    }
    return String(c);
  }

  // One span's shapes in a lane at `y`.
  function spanShapes(g, s, sc, y, win) {
    const { left, now, right } = win;
    const start = parseTime(s.start);
    const end = parseTime(s.end);
    const until = parseTime(s.until);
    const planned = start !== null && start > now;
    const openLeft = start === null || start < left;
    const a = openLeft ? left : start;
    const b = end !== null ? Math.min(end, right) : planned ? (until ?? right) : now;
    const kind = s.kind in KINDS ? s.kind : "hold";
    const x0 = sc.x(a);
    const x1 = Math.max(sc.x(b), x0 + 2);
    const cls = ["span", "kind-" + kind];
    if (planned) cls.push("planned");
    if (end === null && !planned) cls.push("open");
    if (openLeft) cls.push("open-left");
    if (s.select) cls.push("selected");
    if (s.canaries || s.canary) cls.push("canary");
    const rect = el("rect", { x: x0.toFixed(1), y: y + 4, width: (x1 - x0).toFixed(1), height: LANE_H - 8,
      rx: 3, class: cls.join(" ") });
    rect.dataset.hold = s.hold;
    rect.dataset.kind = kind;
    rect.dataset.start = s.start || "";
    rect.dataset.end = s.end || "";
    title(rect, tooltip(s, kind, left, now));
    g.appendChild(rect);
    if (end === null && !planned && until !== null && until > now) {
      // in force now and ending by itself later: the rest of it, dashed
      const rest = el("rect", { x: sc.xNow.toFixed(1), y: y + 4, width: Math.max(2, sc.x(until) - sc.xNow).toFixed(1),
        height: LANE_H - 8, rx: 3, class: "span-rest kind-" + kind });
      title(rest, s.hold + ": in force until " + s.until + " (ends by itself)");
      g.appendChild(rest);
    } else if (end === null && !planned) {
      g.appendChild(title(el("path", { d: "M" + (sc.xNow + 1) + " " + (y + 5) + " l7 " + (LANE_H / 2 - 5) +
        " l-7 " + (LANE_H / 2 - 5) + " z", class: "open-mark" }), s.hold + ": still in force now"));
    }
    if (openLeft) {
      g.appendChild(title(el("path", { d: "M" + (x0 - 1) + " " + (y + 5) + " l-7 " + (LANE_H / 2 - 5) +
        " l7 " + (LANE_H / 2 - 5) + " z", class: "open-mark" }), s.hold + ": began before " + iso(left)));
    }
    const phase = s.canary && typeof s.canary === "object" ? s.canary : null;
    if (phase) {
      // the canary resume: released on a few replicas from its start until promoted or put back
      const c0 = Math.max(x0, sc.x(Math.max(left, parseTime(phase.start) ?? a)));
      const c1 = Math.max(c0 + 2, sc.x(Math.min(right, parseTime(phase.end) ?? (end ?? now))));
      const overlay = el("rect", { x: c0.toFixed(1), y: y + LANE_H - 9, width: (c1 - c0).toFixed(1),
        height: 5, class: "canary-phase" + (phase.outcome ? " outcome-" + phase.outcome : "") });
      overlay.dataset.hold = s.hold;
      const ids = Array.isArray(phase.replicas) ? phase.replicas.join(", ") : "";
      title(overlay, s.hold + ": canary resume" + (ids ? ", released on " + ids : "") +
        (phase.start ? " from " + phase.start : "") + (phase.by ? " by " + phase.by : "") +
        (phase.outcome ? "; " + phase.outcome.replace("_", " ") + " at " + phase.end : "; soaking"));
      g.appendChild(overlay);
    }
    const label = fit((s.reason || "") + (s.by ? " — " + s.by : ""), x1 - x0);
    if (label) g.appendChild(el("text", { x: x0 + 4, y: y + LANE_H / 2 + 4, class: "span-label" }, label));
  }

  // One fleet's SVG (its body from the API), `width` px wide.
  function draw(body, width) {
    const left = parseTime(body.start);
    const now = parseTime(body.now);
    const right = parseTime(body.end);
    const spans = Array.isArray(body.spans) ? body.spans : [];
    const rows = lanes(spans);
    const height = AXIS_H + Math.max(1, rows.length) * LANE_H + 6;
    const svg = el("svg", { class: "timeline", width: width, height: height,
      viewBox: "0 0 " + width + " " + height, role: "img" });
    svg.dataset.fleet = body.fleet;
    svg.dataset.spans = String(spans.length);
    svg.setAttribute("aria-label", "holds of fleet " + body.fleet + " from " + body.start + " to " + body.end);
    title(svg, "holds of fleet " + body.fleet + ": the last " + Math.round((now - left) / 3600) +
      " h (audit trail) and the next " + Math.round((right - now) / 86400) + " days (planned)");
    const sc = scale(left, now, right, LABEL_W, width - 10);
    const win = { left, now, right };
    const axis = el("g", { class: "axis" });
    for (const [t, text, kind] of ticks(left, now, right)) {
      const x = sc.x(t);
      axis.appendChild(el("line", { x1: x, x2: x, y1: AXIS_H - 6, y2: height, class: "tick tick-" + kind }));
      axis.appendChild(el("text", { x: x, y: AXIS_H - 10, class: "tick-label tick-" + kind }, text));
    }
    axis.appendChild(el("text", { x: 4, y: AXIS_H - 10, class: "axis-note" }, "UTC"));
    svg.appendChild(axis);
    rows.forEach(([name, list], i) => {
      const y = AXIS_H + i * LANE_H;
      const g = el("g", { class: "lane" });
      g.dataset.hold = name;
      const label = laneLabel(name, list);
      g.dataset.label = label;
      g.appendChild(title(el("rect", { x: 0, y: y, width: width, height: LANE_H,
        class: "lane-bg lane-" + (i % 2) }), label));
      g.appendChild(el("text", { x: 4, y: y + LANE_H / 2 + 4, class: "lane-label" },
        fit(label, LABEL_W - 4)));
      for (const s of list) spanShapes(g, s, sc, y, win);
      svg.appendChild(g);
    });
    if (rows.length === 0) {
      svg.appendChild(el("text", { x: LABEL_W, y: AXIS_H + LANE_H / 2 + 4, class: "empty-note" },
        "no hold in this time"));
    }
    const nowLine = el("line", { x1: sc.xNow, x2: sc.xNow, y1: AXIS_H - 18, y2: height, class: "now-line" });
    svg.appendChild(title(nowLine, "now: " + body.now));
    svg.appendChild(el("text", { x: sc.xNow + 3, y: AXIS_H - 20, class: "now-label" }, "now"));
    return svg;
  }

  // The legend: one swatch (a small SVG) per kind of mark, in a list that wraps.
  function legend(extra) {
    const items = [["kind-hold", KINDS.hold], ["kind-window", KINDS.window],
      ["kind-schedule", KINDS.schedule], ["span-rest kind-hold", "in force, until it ends by itself"],
      ["planned kind-window", "planned (ahead of now)"], ["open-mark", "began before / still in force"],
      ["now-line", "now"], ...(extra || [])];
    const list = document.createElement("ul");
    list.className = "timeline-legend";
    for (const [cls, text] of items) {
      const li = document.createElement("li");
      li.className = "legend-item";
      const svg = el("svg", { width: 20, height: 14, viewBox: "0 0 20 14", "aria-hidden": "true" });
      if (cls === "now-line") svg.appendChild(el("line", { x1: 10, x2: 10, y1: 0, y2: 14, class: cls }));
      else if (cls === "open-mark") svg.appendChild(el("path", { d: "M6 1 l8 6 l-8 6 z", class: cls }));
      else svg.appendChild(el("rect", { x: 1, y: 1, width: 18, height: 12, rx: 3, class: "span " + cls }));
      const label = document.createElement("span");
      label.className = "legend-label";
      label.textContent = text;
      li.append(svg, label);
      list.appendChild(li);
    }
    return list;
  }

  function unreadable(row) {
    const p = document.createElement("p");
    p.className = "timeline-unreadable warn";
    p.dataset.state = "unreadable";
    p.dataset.fleet = row.fleet;
    p.textContent = "UNREADABLE: " + row.error;
    return p;
  }

  function note(body) {
    const bits = [];
    if (body.truncated) bits.push("the audit trail is complete only since " + body.audit_from);
    if (body.skipped) bits.push(body.skipped + " audit entr" + (body.skipped === 1 ? "y" : "ies") + " could not be read (skipped)");
    if (!bits.length) return null;
    const p = document.createElement("p");
    p.className = "timeline-note";
    p.textContent = bits.join("; ") + ".";
    return p;
  }

  function extras(spans) {
    const out = [];
    if (spans.some((s) => s.select)) out.push(["kind-hold selected", "held replicas chosen by labels"]);
    if (spans.some((s) => s.canaries || s.canary)) out.push(["kind-hold canary", "canary resume"]);
    return out;
  }

  // Render one fleet's body (the fleet page) into `box`.
  function renderOne(box, body) {
    const width = Math.max(700, box.clientWidth || 1100);
    if (body.error) { box.replaceChildren(unreadable(body)); return; }
    const parts = [legend(extras(body.spans || [])), draw(body, width)];
    const n = note(body);
    if (n) parts.push(n);
    box.replaceChildren(...parts);
  }

  // Render every fleet (the overview) into `box`: a heading and an SVG each.
  function renderAll(box, body) {
    const width = Math.max(700, box.clientWidth || 1100);
    const rows = Array.isArray(body.fleets) ? body.fleets : [];
    const all = rows.flatMap((r) => r.spans || []);
    const parts = [legend(extras(all))];
    for (const row of rows) {
      const section = document.createElement("div");
      section.className = "timeline-fleet";
      section.dataset.fleet = row.fleet;
      const h = document.createElement("h3");
      const a = document.createElement("a");
      a.setAttribute("href", "?fleet=" + encodeURIComponent(row.fleet));
      a.textContent = row.fleet;
      h.appendChild(a);
      section.appendChild(h);
      if (row.error) section.appendChild(unreadable(row));
      else {
        section.appendChild(draw(row, width));
        const n = note(row);
        if (n) section.appendChild(n);
      }
      parts.push(section);
    }
    if (body.truncated) {
      const p = document.createElement("p");
      p.className = "timeline-note";
      p.textContent = "Only the most recently active fleets are drawn.";
      parts.push(p);
    }
    box.replaceChildren(...parts);
  }

  return { draw, legend, renderOne, renderAll };
})();
