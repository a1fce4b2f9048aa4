"""GET /api/openapi.json: the OpenAPI 3.1 document of every action, made from the contracts the
actions declare, checked against the action table, by openapi-spec-validator, and against real
answers (each answer of a real request is valid against the schema its action declares)."""

import json

from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from tests.utils import TOKEN, TotemCase, call
from totem.http.api.contract import ID, MAX_ID_CHARS, properties_of
from totem.http.api.sessions import MAX_PROMPT_CHARS, MAX_SESSION_PAGE
from totem.http.routes import PUBLIC_ACTIONS, action_table
from totem.process.terminal import MAX_COLUMNS, MAX_ROWS, MIN_COLUMNS, MIN_ROWS
from totem.services.schedules import KINDS
from totem.services.sessions import MODES

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def path_of(action) -> str:
    return f"/api/{action.name}" + ("/{id}" if action.takes_id else "")


class OpenApiTest(TotemCase):
    async def document(self) -> dict:
        answer = await call(self.app, "openapi.json")
        self.assertEqual(answer.status, 200, answer.body)
        self.assertEqual(answer.header("content-type").split(";")[0], "application/json")
        return answer.json()

    async def test_openapi_is_valid_and_has_every_action(self):
        """The document is valid OpenAPI 3.1 and holds each action of the table at its path,
        with exactly the methods it answers and nothing else, and a typed answer for each."""
        document = await self.document()
        validate(document)
        self.assertEqual(document["openapi"], "3.1.0")
        table = action_table()
        self.assertEqual(set(document["paths"]), {path_of(action) for action in table.values()})
        operation_ids = []
        for action in table.values():
            with self.subTest(action=action.name):
                item = document["paths"][path_of(action)]
                self.assertEqual(set(item), {method.lower() for method in action.methods})
                self.assertEqual(set(item), {"post"} if action.changes else {"get", "head", "post"})
                for method, operation in item.items():
                    operation_ids.append(operation["operationId"])
                    self.assertEqual(operation["summary"], action.label)
                    ids = [p for p in operation.get("parameters", ()) if p["in"] == "path"]
                    self.assertEqual([p["name"] for p in ids], ["id"] if action.takes_id else [])
                    self.assertEqual(operation["responses"]["400"], {"$ref": "#/components/responses/400"})
                    self.assertEqual("401" not in operation["responses"], f"/api/{action.name}" in PUBLIC_ACTIONS)
                    if method != "head":
                        answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
                        self.assertTrue(answer, "an answer with no schema")
                        self.assertEqual(answer, action.answer)
        self.assertEqual(len(operation_ids), len(set(operation_ids)))
        self.assertIn("Sessions_prompt", operation_ids)

    async def test_openapi_inputs_are_the_declarations(self):
        """Each request body and query is the schema its action declares, as it is: its fields,
        closed lists as enums, ids with the pattern and length the router takes, named limits."""
        document = await self.document()
        for action in action_table().values():
            post = document["paths"][path_of(action)]["post"]
            with self.subTest(action=action.name):
                if action.body is None:
                    self.assertNotIn("requestBody", post)
                else:
                    schema = post["requestBody"]["content"]["application/json"]["schema"]
                    self.assertEqual(schema, json.loads(json.dumps(action.body)))
                    for branch in schema.get("oneOf", [schema]):
                        self.assertIs(branch["additionalProperties"], False)
                query = [p for p in post.get("parameters", ()) if p["in"] == "query"]
                self.assertEqual([p["name"] for p in query], list(properties_of(action.query)))
                for parameter in post.get("parameters", ()):
                    if parameter["in"] == "path":
                        self.assertEqual(parameter["schema"], ID)
        self.assertEqual((ID["maxLength"], ID["pattern"]), (MAX_ID_CHARS, "^[^/\\x00]+$"))
        prompt = document["paths"]["/api/sessions_prompt/{id}"]["post"]["requestBody"]["content"]["application/json"]
        properties = prompt["schema"]["properties"]
        self.assertEqual(properties["text"]["maxLength"], MAX_PROMPT_CHARS)
        self.assertEqual(properties["mode"]["enum"], [*MODES, None])
        self.assertEqual(properties["steer"]["type"], ["boolean", "null"])
        self.assertEqual(set(properties) >= {"command", "arguments", "agent"}, True)
        self.assertEqual(set(properties["attachments"]["items"]["required"]), {"name", "mime", "data"})
        resize = document["paths"]["/api/sessions_terminalresize/{id}"]["post"]["requestBody"]["content"]
        schema = resize["application/json"]["schema"]
        self.assertEqual(schema["required"], ["columns", "rows"])
        self.assertEqual((schema["properties"]["columns"]["minimum"], schema["properties"]["columns"]["maximum"]),
                         (MIN_COLUMNS, MAX_COLUMNS))
        self.assertEqual((schema["properties"]["rows"]["minimum"], schema["properties"]["rows"]["maximum"]),
                         (MIN_ROWS, MAX_ROWS))
        saving = document["paths"]["/api/schedules_save"]["post"]["requestBody"]["content"]["application/json"]
        self.assertEqual([branch["properties"]["kind"]["const"] for branch in saving["schema"]["oneOf"]], list(KINDS))
        listing = document["paths"]["/api/sessions"]["get"]
        self.assertEqual([(p["name"], p["required"]) for p in listing["parameters"]],
                         [("projectid", True), ("limit", False), ("before", False)])
        self.assertEqual({k: listing["parameters"][1]["schema"][k] for k in ("type", "minimum", "maximum")},
                         {"type": "integer", "minimum": 1, "maximum": MAX_SESSION_PAGE})
        removal = document["paths"]["/api/projects_remove/{id}"]["post"]["responses"]["200"]
        self.assertEqual(removal["content"]["application/json"]["schema"]["properties"]["success"], {"const": True})
        commands = document["paths"]["/api/projects_commands/{id}"]["get"]["responses"]["200"]
        self.assertIn("invalid", commands["description"])
        self.assertEqual(document["security"], [{}])  # this server has no token

    async def test_real_answers_match_their_schemas(self):
        """The answer of each read (and of a few changes) to real ids is valid against the schema
        its action declares."""
        table = action_table()
        project = await self.open_project()
        session = await self.create_session(project["id"], "S")
        pid, sid = project["id"], session["id"]
        calls = [
            ("account", None, None, ""), ("account", None, None, "wait=sandbox"), ("mcptokens_list", None, None, ""),
            ("mcptokens_create", {"name": "t"}, None, ""), ("projects", None, None, ""),
            ("projects_files", None, pid, ""), ("projects_git", None, pid, ""), ("projects_commands", None, pid, ""),
            ("projects_mcp", None, pid, f"sessionid={sid}"), ("folders", None, None, ""),
            ("sessions", None, None, f"projectid={pid}"), ("sessions_read", None, sid, ""),
            ("sessions_messages", None, sid, ""), ("sessions_todos", None, sid, ""), ("sessions_jobs", None, sid, ""),
            ("sessions_git", None, sid, ""), ("sessions_diff", None, sid, ""),
            ("sessions_update", {"name": "T"}, sid, ""), ("sessions_fork", {}, sid, ""),
            ("sessions_terminal", {}, sid, ""), ("schedules", None, None, f"projectid={pid}"),
            ("settings", None, None, f"projectid={pid}"),
            ("settings_save", {"scope": "project", "projectid": pid, "key": "steps", "value": 7}, None, ""),
            ("providers", None, None, ""), ("providers_templates", None, None, ""),
            ("providers_catalog", None, None, ""), ("providers_models", None, None, ""),
            ("permissions", None, None, f"projectid={pid}"), ("permissions_tools", None, None, ""),
            ("permissions_save", {"projectid": pid, "tool": "read", "pattern": "src/**", "action": "allow"}, None, ""),
            ("openapi.json", None, None, ""), ("sessions_remove", {}, sid, ""),
        ]
        for name, body, ident, query in calls:
            with self.subTest(action=name, query=query):
                answer = await call(self.app, name, body, ident=ident, query=query)
                self.assertEqual(answer.status, 200, answer.body)
                problems = [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
                            for error in Draft202012Validator(table[name].answer).iter_errors(answer.json())]
                self.assertEqual(problems, [])


class OpenApiTokenTest(TotemCase):
    settings = {"token": TOKEN}

    async def test_openapi_needs_sign_in_like_every_read(self):
        """With a token, the document is 401 without it and 200 with it, and says so."""
        answer = await call(self.app, "openapi.json")
        self.assertEqual(answer.status, 401)
        answer = await call(self.app, "openapi.json", headers=BEARER)
        self.assertEqual(answer.status, 200, answer.body)
        document = answer.json()
        self.assertEqual(document["security"], [{"bearer": []}, {"cookie": []}])
        self.assertEqual(document["paths"]["/api/login"]["post"]["security"], [{}])
        posted = await call(self.app, "openapi.json", {}, headers=BEARER)  # POST, as every read answers
        self.assertEqual(posted.status, 200, posted.body)
