"""GET /api/openapi.json: the OpenAPI 3.1 document of every action, checked against the action
table and by openapi-spec-validator; signed in like every other read."""

from openapi_spec_validator import validate

from tests.test_fuzz import body_fields
from tests.utils import TOKEN, TotemCase, call
from totem.http.api.sessions import MAX_PROMPT_CHARS
from totem.http.routes import PUBLIC_ACTIONS, action_table
from totem.process.terminal import MAX_COLUMNS, MAX_ROWS, MIN_COLUMNS, MIN_ROWS

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
        with exactly the methods it answers and nothing else."""
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
                for operation in item.values():
                    operation_ids.append(operation["operationId"])
                    self.assertEqual(operation["summary"], action.label)
                    ids = [p for p in operation.get("parameters", ()) if p["in"] == "path"]
                    self.assertEqual([p["name"] for p in ids], ["id"] if action.takes_id else [])
                    self.assertEqual(operation["responses"]["400"], {"$ref": "#/components/responses/400"})
                    self.assertEqual("401" not in operation["responses"], f"/api/{action.name}" in PUBLIC_ACTIONS)
        self.assertEqual(len(operation_ids), len(set(operation_ids)))
        self.assertIn("Sessions_prompt", operation_ids)

    async def test_openapi_body_fields_are_the_handlers(self):
        """Each request body lists exactly the fields its handler accepts (unknown ones refused),
        with the types, limits and required fields of its checks."""
        document = await self.document()
        for action in action_table().values():
            fields = body_fields(action.handler)
            post = document["paths"][path_of(action)]["post"]
            with self.subTest(action=action.name):
                if not fields:
                    self.assertNotIn("requestBody", post)
                    continue
                schema = post["requestBody"]["content"]["application/json"]["schema"]
                self.assertEqual(set(schema["properties"]), set(fields))
                self.assertIs(schema["additionalProperties"], False)
        prompt = document["paths"]["/api/sessions_prompt/{id}"]["post"]["requestBody"]["content"]["application/json"]
        properties = prompt["schema"]["properties"]
        self.assertEqual(properties["text"]["maxLength"], MAX_PROMPT_CHARS)
        self.assertEqual(properties["mode"]["enum"], ["build", "plan", None])
        self.assertEqual(properties["steer"]["type"], ["boolean", "null"])
        self.assertEqual(set(properties) >= {"command", "arguments", "agent"}, True)
        self.assertNotIn("type", properties["attachments"])  # checked in code: no schema is claimed
        self.assertIn("checked in code", properties["attachments"]["description"])
        resize = document["paths"]["/api/sessions_terminalresize/{id}"]["post"]["requestBody"]["content"]
        schema = resize["application/json"]["schema"]
        self.assertEqual(schema["required"], ["columns", "rows"])
        self.assertEqual((schema["properties"]["columns"]["minimum"], schema["properties"]["columns"]["maximum"]),
                         (MIN_COLUMNS, MAX_COLUMNS))
        self.assertEqual((schema["properties"]["rows"]["minimum"], schema["properties"]["rows"]["maximum"]),
                         (MIN_ROWS, MAX_ROWS))
        listing = document["paths"]["/api/sessions"]["get"]
        self.assertEqual([(p["name"], p["required"]) for p in listing["parameters"]],
                         [("projectid", True), ("limit", False), ("before", False)])
        self.assertEqual(listing["parameters"][1]["schema"], {"type": "integer", "minimum": 1, "maximum": 500})
        removal = document["paths"]["/api/projects_remove/{id}"]["post"]["responses"]["200"]
        self.assertEqual(removal["content"]["application/json"]["schema"], {"$ref": "#/components/schemas/Success"})
        commands = document["paths"]["/api/projects_commands/{id}"]["get"]
        self.assertIn("invalid: [{file, error}]", commands["description"])
        self.assertEqual(document["security"], [{}])  # this server has no token


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
