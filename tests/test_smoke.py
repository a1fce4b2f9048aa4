from tests.utils import TotemCase, call, open_ws, next_event


class SmokeTest(TotemCase):
    async def test_projects_list_empty(self):
        """A fresh server has no projects."""
        answer = await call(self.app, "projects")
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.json(), [])

    async def test_ws_session_updated(self):
        """Creating a session is announced on the WebSocket."""
        project = await self.open_project()
        async with await open_ws(self.app) as ws:
            session = await self.create_session(project["id"])
            event = await next_event(ws)
            self.assertEqual(event["type"], "session.updated")
            self.assertEqual(event["data"]["session"]["id"], session["id"])
