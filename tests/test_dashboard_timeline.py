"""The holds timeline in a real browser (Debian's chromium through Playwright's Python API).

Fleets made with the real ``Fleet`` API on a Redis of their own: ``orders`` with a hold that
came and went (``db``), one in force now (``incident``, whose reason is markup), a one-off
window planned two days ahead (``maint``), a schedule (``nightly``, 02:00 Berlin time);
``billing`` with a hold of its own; ``broken``,
whose state hash is not a hash. The fleet page draws ``orders``' lanes as SVG (past spans left
of the now line, the window right of it, tooltips in <title>, hour ticks, a legend); the
overview draws every fleet, ``broken`` as unreadable and the others as usual. The SVG is
checked through the DOM; a screenshot is saved under the temp dir (not committed).
"""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from coordinator import Fleet
from coordinator.demo.localredis import LocalRedis
from replica.contract import Keys, format_time, now_utc
from tests.dashkit import ADMIN, Server, chromium_or_skip, dashboard_page
from tests.test_dashboard_fleets import run_async, settings

pytestmark = pytest.mark.slow
SHOTS = Path(tempfile.gettempdir())
MARKUP = '<img src=x onerror="window.pwned=1"> <b>disk</b>'
SLOW = 20_000  # ms: the timeline comes a few poll ticks after the page


def boxes(page: Any, selector: str) -> list[dict[str, Any]]:
    """Each SVG element's data and where it is drawn (its x and width in the SVG)."""
    found: list[dict[str, Any]] = page.locator(selector).evaluate_all(
        "els => els.map(e => ({hold: e.dataset.hold || '', kind: e.dataset.kind || '',"
        " cls: e.getAttribute('class'), x: e.x ? e.x.baseVal.value : 0,"
        " w: e.width ? e.width.baseVal.value : 0,"
        " title: (e.querySelector('title') || {}).textContent || ''}))")
    return found


async def spread(client: aioredis.Redis, fleet: str, hours_ago: list[float]) -> None:
    """Move the fleet's audit entries (oldest first) and its holds' ``since`` back in time,
    each entry to its hours ago: the trail as the Fleet calls wrote it, hours apart, so the
    picture is one a day of operations draws."""
    keys = Keys(fleet)
    entries = list(reversed(await client.xrevrange(keys.audit) or []))
    assert len(entries) == len(hours_ago)
    await client.delete(keys.audit)
    now = now_utc()
    paused_at: dict[str, str] = {}  # each hold's last pause entry, as moved
    for (_, fields), ago in zip(entries, hours_ago, strict=True):
        at = format_time(now - timedelta(hours=ago))
        if fields.get("action") in ("pause", "hold_added", "hold_scheduled"):
            paused_at[fields.get("hold", "")] = at
        await client.xadd(keys.audit, {**fields, "at": at},
                          id=f"{int((now - timedelta(hours=ago)).timestamp() * 1000)}-0")
    holds = json.loads(await client.hget(keys.state, "holds") or "{}")
    for name, hold in holds.items():
        # By the hold's name, not by its time: two calls can share a millisecond, and a map
        # of times sent the hold paused 3 h ago to its canary resume's 1 h ago now and then.
        hold["since"] = paused_at.get(name, hold["since"])
    await client.hset(keys.state, "holds", json.dumps(holds))


@pytest.fixture
def fleets(private_redis: LocalRedis) -> None:
    async def make(client: aioredis.Redis) -> None:
        orders = Fleet(client, "orders")
        await orders.pause("db failover", by="alice", hold="db")
        await orders.resume(by="carol", hold="db")
        await orders.pause(MARKUP, by="bob", hold="incident")
        await orders.pause("kernel upgrade", by="frank", hold="maint",
                           starts_at=now_utc() + timedelta(days=2),
                           auto_resume_after=timedelta(hours=6))
        await spread(client, "orders", [20, 16.5, 5, 1])
        await orders.add_schedule("nightly", "0 2 * * *", timedelta(hours=1), "Europe/Berlin",
                                  "backups", by="ops")
        await Fleet(client, "billing").pause("ledger close", by="dana", hold="close")
        await Fleet(client, "broken").pause("drill", by="ops")
        await client.delete(Keys("broken").state)
        await client.set(Keys("broken").state, "garbage")  # every read of it fails

    run_async(make, private_redis.url)


def test_the_fleet_page_draws_its_holds_past_and_planned_around_the_now_line(
    private_redis: LocalRedis, fleets: None
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    with Server(settings(private_redis.url, "orders")) as server, \
            dashboard_page(executable, height=1400) as page:
        page.goto(server.fleet_url("orders"))
        page.fill("#token", ADMIN)
        svg = page.locator("#timeline svg.timeline")
        expect(svg).to_have_count(1, timeout=SLOW)
        expect(svg).to_have_attribute("data-fleet", "orders")
        lanes = page.locator("#timeline g.lane")
        assert lanes.evaluate_all("ls => ls.map(l => l.dataset.hold)") == [
            "db", "incident", "nightly", "maint"]
        now_x = float(page.locator("#timeline svg.timeline line.now-line").get_attribute("x1") or "nan")
        drawn = boxes(page, "#timeline svg.timeline rect.span")
        spans = {b["hold"]: b for b in drawn if b["hold"] != "nightly"}
        assert set(spans) == {"db", "incident", "maint"}
        # the schedule: an occurrence a night for the next 7 days, each right of now
        nightly = [b for b in drawn if b["hold"] == "nightly"]
        assert len(nightly) in (7, 8) and all(b["x"] > now_x for b in nightly)
        assert all(b["kind"] == "schedule" and "0 2 * * * (Europe/Berlin)" in b["title"]
                   and "why: backups" in b["title"] for b in nightly)
        db, incident, maint = spans["db"], spans["incident"], spans["maint"]
        # the past left of now, the planned window right of it
        assert db["x"] + db["w"] < incident["x"] < now_x and db["kind"] == "hold"
        assert db["w"] > 50  # 3.5 of 24 hours
        assert "by: alice" in db["title"] and "why: db failover" in db["title"]
        assert "ended: released by carol" in db["title"]
        assert incident["x"] < now_x and incident["x"] + incident["w"] == pytest.approx(now_x, abs=1)
        assert "open" in incident["cls"] and "still in force" in incident["title"]
        assert maint["x"] > now_x and maint["kind"] == "window" and "planned" in maint["cls"]
        assert "by: frank" in maint["title"] and "why: kernel upgrade" in maint["title"]
        # a mark says the open one is still in force; the reason is text, never markup
        expect(page.locator('#timeline g.lane[data-hold="incident"] path.open-mark')).to_have_count(1)
        label = page.locator('#timeline g.lane[data-hold="incident"] text.span-label')
        assert MARKUP.startswith(label.text_content().rstrip("…").split(" — ")[0])
        assert page.locator("#timeline img, #timeline b").count() == 0
        assert page.evaluate("window.pwned === undefined")
        # hour ticks left of now, day ticks right of it, a now label and a legend
        hours = page.locator("#timeline text.tick-label.tick-hour").all_text_contents()
        assert len(hours) >= 6 and all(h.endswith(":00") for h in hours)
        assert page.locator("#timeline text.tick-label.tick-day").count() >= 6
        expect(page.locator("#timeline text.now-label")).to_have_text("now")
        legend = page.locator("#timeline .timeline-legend .legend-label").all_text_contents()
        assert {"hold (from the audit trail)", "one-off window", "schedule occurrence",
                "now"} <= set(legend)
        page.locator("#timeline-panel").screenshot(path=str(SHOTS / "fleetgate-timeline.png"))


def test_the_overview_draws_every_fleet_and_one_that_cannot_be_read_says_so(
    private_redis: LocalRedis, fleets: None
) -> None:
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    with Server(settings(private_redis.url, "orders")) as server, \
            dashboard_page(executable, height=1200) as page:
        page.goto(server.url)
        page.fill("#token", ADMIN)
        sections = page.locator("#timelines .timeline-fleet")
        expect(sections).to_have_count(3, timeout=SLOW)
        assert sections.evaluate_all("s => s.map(x => x.dataset.fleet)") == [
            "broken", "billing", "orders"]
        broken = page.locator('#timelines .timeline-fleet[data-fleet="broken"]')
        expect(broken.locator(".timeline-unreadable")).to_contain_text("UNREADABLE")
        expect(broken.locator(".timeline-unreadable")).to_contain_text("WRONGTYPE")
        assert broken.locator("svg").count() == 0
        billing = boxes(page, '#timelines .timeline-fleet[data-fleet="billing"] rect.span')
        assert [(b["hold"], "by: dana" in b["title"]) for b in billing] == [("close", True)]
        orders = page.locator('#timelines .timeline-fleet[data-fleet="orders"] rect.span')
        expect(orders.and_(page.locator(".kind-hold, .kind-window"))).to_have_count(3)
        assert page.locator('#timelines .timeline-fleet[data-fleet="orders"] rect.kind-schedule').count() >= 7
        expect(page.locator("#fleets tbody tr")).to_have_count(3)  # the table as usual
        page.locator("#timelines-panel").screenshot(path=str(SHOTS / "fleetgate-timelines.png"))


def test_a_selected_hold_and_a_canary_resume_are_drawn_with_what_they_hold(
    private_redis: LocalRedis,
) -> None:
    """A hold for part of the fleet (``pause(select=...)``) and one a canary resume has released
    on two replicas (``resume(canary="canary", canaries=[...])``), through the real ``Fleet``
    calls: the lanes name their selectors, the canary phase is a bar of its own."""
    executable = chromium_or_skip()
    from playwright.sync_api import expect

    async def make(client: aioredis.Redis) -> None:
        fleet = Fleet(client, "zones")
        await fleet.pause("eu-west-1a database failover", by="alice", hold="zone-a",
                          select="zone=eu-west-1a")
        await fleet.pause("bad build 1.4.2", by="bob", hold="v142", select="version=1.4.2")
        await fleet.resume(by="carol", hold="v142", reason="try two", canary="canary",
                           canaries=["zones-1", "zones-2"])
        await spread(client, "zones", [6, 3, 1])

    run_async(make, private_redis.url)
    with Server(settings(private_redis.url, "zones")) as server, \
            dashboard_page(executable, height=900) as page:
        page.goto(server.fleet_url("zones"))
        page.fill("#token", ADMIN)
        lanes = page.locator("#timeline g.lane")
        expect(lanes).to_have_count(2, timeout=SLOW)
        labels = lanes.evaluate_all("ls => ls.map(l => l.dataset.label)")
        assert labels == ["zone-a [zone=eu-west-1a]", "v142 [version=1.4.2]"]
        shown = page.locator("#timeline g.lane text.lane-label").all_text_contents()
        assert [label.startswith(text.rstrip("…")) for label, text in zip(labels, shown, strict=True)] == [True, True]
        spans = {b["hold"]: b for b in boxes(page, "#timeline svg.timeline rect.span")}
        zone, canary = spans["zone-a"], spans["v142"]
        assert "selected" in zone["cls"] and "replicas: zone=eu-west-1a" in zone["title"]
        assert "canary" in canary["cls"] and "canaries: zones-1, zones-2" in canary["title"]
        [phase] = boxes(page, "#timeline rect.canary-phase")
        assert phase["hold"] == "v142" and canary["x"] < phase["x"] < canary["x"] + canary["w"]
        assert "released on zones-1, zones-2" in phase["title"] and "soaking" in phase["title"]
        legend = page.locator("#timeline .timeline-legend .legend-label").all_text_contents()
        assert {"held replicas chosen by labels", "canary resume"} <= set(legend)
        page.locator("#timeline-panel").screenshot(path=str(SHOTS / "fleetgate-timeline-scope.png"))
