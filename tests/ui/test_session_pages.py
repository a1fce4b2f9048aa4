"""The session list in pages (Sessions|list answers {sessions, more}), in the browser."""

from playwright.sync_api import expect

from totem.services.sessions import DEFAULT_SESSION_PAGE

EXTRA = 5


def test_session_list_reads_older_pages(live, page):
    """A project with more sessions than a page: the first page is listed with an "Older
    sessions" row that reads the next; a session in the address that is further down is shown
    and listed at once; no session is listed twice."""
    project = live.project("many")

    async def create():
        return [await live.app.store.create_session(project["id"], f"S{n:03}")
                for n in range(DEFAULT_SESSION_PAGE + EXTRA)]
    made = live.call(create())
    oldest = made[0]
    rows = page.locator("#sessions li[data-id]")
    page.goto(f"/#/{project['id']}/{oldest['id']}")
    expect(page.locator("#session-title")).to_have_text(oldest["name"])
    expect(page.locator("#connection")).to_have_attribute("data-state", "open")
    expect(rows).to_have_count(DEFAULT_SESSION_PAGE + 1)
    expect(rows.first).to_have_attribute("data-id", made[-1]["id"])
    expect(page.locator(f"#sessions li[data-id='{oldest['id']}']")).to_have_class("active")

    page.locator("#sessions li[data-more]").click()
    expect(rows).to_have_count(DEFAULT_SESSION_PAGE + EXTRA)
    expect(page.locator("#sessions li[data-more]")).to_have_count(0)
    listed = rows.evaluate_all("(items) => items.map((item) => item.dataset.id)")
    assert sorted(listed) == sorted(session["id"] for session in made)
