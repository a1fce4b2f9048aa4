"""Providers through the real server: templates, saved providers with write-only keys, the
models of each kind read from the fixture answers, detection, the catalog and model targets."""

import asyncio
import copy
import logging
import os
import socket

from tests.model_server import ScriptedModel, models_fixture
from tests.utils import MS, TotemCase, call
from totem.agent.kinds import Fetch, kind_named
from totem.agent.kinds.base import price_of
from totem.agent.kinds.ollama import MAX_OLLAMA_NUM_CTX
from totem.agent.provider_errors import KIND_INVALID_REQUEST, ProviderError
from totem.agent.providers import ModelError, ProviderTarget
from totem.errors import ApiError

KEY = "sk-or-v1-5f0c2b9e7a1d4c3b8e6f0a9d2c4b7e1f"
OTHER_KEY = "sk-proj-second-key-9a8b7c6d5e4f3a2b1c0d"
TEMPLATE_URLS = {
    "ollama": "http://127.0.0.1:11434", "llamacpp": "http://127.0.0.1:8080", "lmstudio": "http://127.0.0.1:1234",
    "openrouter": "https://openrouter.ai/api/v1", "openai": "https://api.openai.com/v1",
    "groq": "https://api.groq.com/openai/v1", "mistral": "https://api.mistral.ai/v1",
    "deepseek": "https://api.deepseek.com", "together": "https://api.together.xyz/v1",
    "anthropic": "https://api.anthropic.com", "gemini": "https://generativelanguage.googleapis.com",
    "compatible": "http://127.0.0.1:8000/v1",
}


def model(ident, name=None, context=None, tools=None, reasoning=None, free=False, price=None):
    """A model as `available` lists it; tools and reasoning None: the provider does not say."""
    return {"id": ident, "name": name or ident, "context": context, "tools": tools, "reasoning": reasoning,
            "free": free, "price": price}


def closed_port_url() -> str:
    """A loopback URL where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class ProvidersCase(TotemCase):
    """A running Totem and a scripted provider; every answer body is kept to search for the key."""

    async def asyncSetUp(self):
        await super().asyncSetUp()
        self.bodies: list[bytes] = []
        self.model = await ScriptedModel().__aenter__()

    async def asyncTearDown(self):
        await self.model.__aexit__(None, None, None)
        self.assertEqual(self.model.errors, [])
        for body in self.bodies:
            self.assertNotIn(KEY.encode(), body)
            self.assertNotIn(OTHER_KEY.encode(), body)
        await super().asyncTearDown()

    async def ask(self, name, body=None, ident=None, method=None):
        answer = await call(self.app, name, body, ident=ident, method=method)
        self.bodies.append(answer.body)
        return answer

    async def save(self, **body) -> dict:
        answer = await self.ask("providers_save", body)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    async def available(self, **body):
        answer = await self.ask("providers_available", body)
        self.assertEqual(answer.status, 200, answer.body)
        return answer.json()

    def requests_to(self, path: str):
        return [r for r in self.model.requests if r.path == path]


class TemplatesTest(ProvidersCase):
    async def test_templates_list_known_providers(self):
        """Providers|templates lists the known providers and the generic OpenAI-compatible kind,
        with their default URLs."""
        answer = await self.ask("providers_templates")
        self.assertEqual(answer.status, 200)
        templates = answer.json()
        self.assertEqual({t["kind"]: t["url"] for t in templates}, TEMPLATE_URLS)
        self.assertEqual([t["name"] for t in templates], ["Ollama", "llama.cpp", "LM Studio", "OpenRouter", "OpenAI",
                                                          "Groq", "Mistral", "DeepSeek", "Together",
                                                          "Anthropic", "Google Gemini", "OpenAI-compatible"])
        for template in templates:
            self.assertEqual(set(template), {"id", "name", "kind", "url", "key", "local", "icon"})
            self.assertIn(template["key"], ("needed", "optional", "none"))
            self.assertIs(template["local"], template["kind"] in ("ollama", "llamacpp", "lmstudio"))


class SaveTest(ProvidersCase):
    async def test_providers_save_answers_without_key(self):
        """A saved provider is listed with haskey and never with its key."""
        saved = await self.save(name="OpenRouter", kind="openrouter", url=self.model.url + "/", key=KEY)
        self.assertEqual(set(saved), {"id", "name", "kind", "url", "icon", "haskey", "models", "created", "updated"})
        self.assertEqual((saved["name"], saved["kind"], saved["url"], saved["haskey"], saved["icon"]),
                         ("OpenRouter", "openrouter", self.model.url, True, "openrouter"))
        listed = (await self.ask("providers")).json()
        self.assertEqual(listed, [saved])

    async def test_providers_save_key_encrypted_in_database(self):
        """The stored key is the vault's ciphertext: neither the database nor its WAL holds it."""
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        row = await self.app.store.get_provider(saved["id"])
        self.assertNotIn(KEY.encode(), row["secret"])
        self.assertEqual(self.app.vault.decrypt(row["secret"]), KEY)
        path = self.app.store.path
        files = [p for p in (path, path + "-wal", path + "-shm") if os.path.exists(p)]
        self.assertIn(path + "-wal", files)
        for name in files:
            with open(name, "rb") as handle:
                self.assertNotIn(KEY.encode(), handle.read(), name)

    async def test_providers_save_without_key_keeps_key(self):
        """An update without key (or with key null) keeps the stored key, which calls still use."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        for extra in ({}, {"key": None}):
            updated = await self.save(id=saved["id"], name="Renamed", kind="openai", url=self.model.url, **extra)
            self.assertEqual((updated["name"], updated["haskey"]), ("Renamed", True))
        await self.available(id=saved["id"])
        self.assertEqual(self.model.requests[-1].headers["authorization"], f"Bearer {KEY}")

    async def test_providers_save_new_key_replaces(self):
        """An update with a key replaces the stored one."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        updated = await self.save(id=saved["id"], name="OpenAI", kind="openai", url=self.model.url, key=OTHER_KEY)
        self.assertTrue(updated["haskey"])
        await self.available(id=saved["id"])
        self.assertEqual(self.model.requests[-1].headers["authorization"], f"Bearer {OTHER_KEY}")

    async def test_providers_save_empty_key_clears(self):
        """An update with key "" removes the key: calls go out without Authorization."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        updated = await self.save(id=saved["id"], name="OpenAI", kind="openai", url=self.model.url, key="")
        self.assertFalse(updated["haskey"])
        self.assertIsNone((await self.app.store.get_provider(saved["id"]))["secret"])
        await self.available(id=saved["id"])
        self.assertNotIn("authorization", self.model.requests[-1].headers)

    async def test_providers_save_unknown_id_404(self):
        """Changing a provider that does not exist is 404 and creates nothing."""
        answer = await self.ask("providers_save", {"id": "nope", "name": "X", "kind": "openai",
                                                   "url": self.model.url, "key": KEY})
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.json(), [{"name": "id", "error": "no provider nope"}])
        self.assertEqual((await self.ask("providers")).json(), [])

    async def test_providers_save_missing_fields_400(self):
        """An empty body lists every required field in the error shape."""
        answer = await self.ask("providers_save", {})
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json(), [{"name": "name", "error": "is required"},
                                         {"name": "kind", "error": "is required"},
                                         {"name": "url", "error": "is required"}])

    async def test_providers_save_invalid_fields_400(self):
        """Each bad field is a 400 naming that field, and nothing is stored."""
        good = {"name": "P", "kind": "openai", "url": "https://api.example.com/v1", "key": KEY}
        cases = [
            ({"name": "x" * 101}, "name"), ({"name": ""}, "name"), ({"name": 7}, "name"),
            ({"kind": "no-such-kind"}, "kind"), ({"kind": None}, "kind"),
            ({"url": "ftp://example.com"}, "url"), ({"url": "http://"}, "url"), ({"url": "example.com"}, "url"),
            ({"url": "http://user:pw@example.com"}, "url"), ({"url": "http://example.com:99999"}, "url"),
            ({"url": "http://exa mple.com"}, "url"), ({"url": 12}, "url"),
            ({"key": "has space"}, "key"), ({"key": "line\nbreak" + KEY}, "key"), ({"key": 42}, "key"),
            ({"key": "é" + KEY}, "key"), ({"key": "k" * 4097}, "key"),
            ({"models": "o4-mini"}, "models"), ({"models": [1]}, "models"),
            ({"extra": True}, "extra"),
        ]
        for change, field in cases:
            with self.subTest(change=str(change)[:60]):
                answer = await self.ask("providers_save", {**good, **change})
                self.assertEqual(answer.status, 400, answer.body)
                errors = answer.json()
                self.assertEqual([e["name"] for e in errors], [field])
                self.assertIsInstance(errors[0]["error"], str)
        self.assertEqual((await self.ask("providers")).json(), [])

    async def test_providers_save_get_405(self):
        """providers_save changes state, so it answers POST only."""
        answer = await self.ask("providers_save", method="GET")
        self.assertEqual(answer.status, 405)


class RemoveTest(ProvidersCase):
    async def test_providers_remove_forgets_provider(self):
        """Removing a provider answers success; it is gone from the list and its row is deleted."""
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        answer = await self.ask("providers_remove", ident=saved["id"], method="POST")
        self.assertEqual(answer.status, 200)
        self.assertEqual(answer.json(), {"success": True, "value": saved["id"]})
        self.assertEqual((await self.ask("providers")).json(), [])
        self.assertIsNone(await self.app.store.get_provider(saved["id"]))

    async def test_providers_remove_unknown_404(self):
        """Removing an unknown provider is 404."""
        answer = await self.ask("providers_remove", ident="nope", method="POST")
        self.assertEqual(answer.status, 404)
        self.assertEqual(answer.json(), [{"name": "id", "error": "no provider nope"}])

    async def test_providers_remove_get_405(self):
        """A GET never removes a provider."""
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url)
        answer = await self.ask("providers_remove", ident=saved["id"], method="GET")
        self.assertEqual(answer.status, 405)
        self.assertEqual(len((await self.ask("providers")).json()), 1)


class AvailableTest(ProvidersCase):
    async def test_available_openrouter_reads_capabilities(self):
        """OpenRouter: context_length, tools and reasoning from supported_parameters, free and the
        price (USD per token strings, kept per million tokens) from pricing."""
        self.model.serve_models("openrouter_api_v1_models")
        models = await self.available(url=self.model.url, kind="openrouter", key=KEY)
        self.assertEqual(models, [
            model("qwen/qwen3-coder", "Qwen: Qwen3 Coder 480B A35B", 262144, tools=True, reasoning=False,
                  price={"input": 0.22, "output": 0.95, "cacheread": 0.022}),
            model("qwen/qwen3-coder:free", "Qwen: Qwen3 Coder 480B A35B (free)", 262000, tools=True,
                  reasoning=False, free=True, price={"input": 0.0, "output": 0.0}),
            model("deepseek/deepseek-r1-0528", "DeepSeek: R1 0528", 163840, tools=False, reasoning=True,
                  price={"input": 0.5, "output": 2.15}),
        ])
        request = self.requests_to("/v1/models")[0]
        self.assertEqual((request.method, request.headers["authorization"]), ("GET", f"Bearer {KEY}"))

    async def test_available_ollama_reads_tags_and_show(self):
        """Ollama: /api/tags names the models, /api/show gives capabilities and the context window."""
        self.model.serve_models("ollama_api_tags", "ollama_api_show")
        models = await self.available(url=self.model.base, kind="ollama")
        self.assertEqual(models, [model("qwen3-coder:30b", context=262144, tools=True, free=True, reasoning=False),
                                  model("gpt-oss:20b", context=262144, tools=True, free=True, reasoning=False)])
        shown = sorted(r.body["model"] for r in self.requests_to("/api/show"))
        self.assertEqual(shown, ["gpt-oss:20b", "qwen3-coder:30b"])
        self.assertNotIn("authorization", self.requests_to("/api/tags")[0].headers)

    async def test_available_ollama_thinking_and_embedding(self):
        """Ollama: "thinking" means reasoning; a model without "completion" (embeddings) is left out."""
        show = copy.deepcopy(models_fixture("ollama_api_show"))
        show["capabilities"] = ["completion", "tools", "thinking"]
        self.model.serve_models("ollama_api_tags")
        self.model.serve_json("POST", "/api/show", show)
        models = await self.available(url=self.model.base + "/v1", kind="ollama")  # the /v1 URL people paste
        self.assertTrue(all(m["reasoning"] for m in models))
        show["capabilities"] = ["embedding"]
        self.model.serve_json("POST", "/api/show", show)
        self.assertEqual(await self.available(url=self.model.base, kind="ollama"), [])

    async def test_available_lmstudio_leaves_out_embeddings(self):
        """LM Studio: /api/v0/models, the loaded context window, tool_use; embeddings left out."""
        self.model.serve_models("lmstudio_api_v0_models")
        models = await self.available(url=self.model.base, kind="lmstudio")
        self.assertEqual(models, [model("qwen/qwen3-coder-30b", context=4096, tools=True, free=True)])

    async def test_available_lmstudio_old_build_uses_v1(self):
        """LM Studio without /api/v0 (404) falls back to the plain /v1/models list."""
        self.model.serve_json("GET", "/v1/models", {"object": "list", "data": [{"id": "local-model"}]})
        models = await self.available(url=self.model.base, kind="lmstudio")
        self.assertEqual(models, [model("local-model", free=True)])

    async def test_available_llamacpp_reads_props(self):
        """llama.cpp: the window is /props n_ctx (not n_ctx_train), tools from chat_template_caps."""
        self.model.serve_models("llamacpp_v1_models", "llamacpp_props")
        models = await self.available(url=self.model.base, kind="llamacpp")
        self.assertEqual(models, [model("Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf", context=32768, tools=True,
                                        free=True)])

    async def test_available_llamacpp_without_props_reads_slots(self):
        """llama.cpp whose /props does not answer: the window is the smallest n_ctx of /slots."""
        self.model.serve_models("llamacpp_v1_models")
        self.model.serve_json("GET", "/slots", [{"id": 0, "n_ctx": 8192}, {"id": 1, "n_ctx": 4096}, {"id": 2}])
        models = await self.available(url=self.model.base, kind="llamacpp")
        self.assertEqual([m["context"] for m in models], [4096])

    async def test_available_llamacpp_without_props_or_slots_guesses(self):
        """Neither /props nor /slots (a router, an old build): the window is not known."""
        self.model.serve_models("llamacpp_v1_models")
        self.model.serve_json("GET", "/slots", {"error": {"code": 501, "message": "This server does not "
                                                          "support slots endpoint."}}, 501)
        models = await self.available(url=self.model.base, kind="llamacpp")
        self.assertEqual([m["context"] for m in models], [None])

    async def test_available_vllm_reads_max_model_len(self):
        """vLLM (an OpenAI-compatible server): `max_model_len` of /v1/models is the window it enforces."""
        self.model.serve_json("GET", "/v1/models", {"object": "list", "data": [
            {"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen3-8B",
             "max_model_len": 8192, "permission": []}]})
        models = await self.available(url=self.model.url, kind="compatible")
        self.assertEqual([(m["id"], m["context"]) for m in models], [("Qwen/Qwen3-8B", 8192)])

    async def test_available_openai_plain_list(self):
        """OpenAI: ids only, so context, tools and reasoning come from the template's hints."""
        self.model.serve_models("openai_v1_models")
        models = await self.available(url=self.model.url, kind="openai", key=KEY)
        self.assertEqual(models, [model("gpt-4.1-2025-04-14", context=1047576, tools=True, reasoning=False),
                                  model("o4-mini", context=200000, tools=True, reasoning=True)])

    async def test_available_compatible_without_key(self):
        """OpenAI-compatible: any server of that API, asked without a key (no Authorization)."""
        self.model.serve_models("openai_v1_models")
        models = await self.available(url=self.model.url, kind="compatible")
        self.assertEqual([m["id"] for m in models], ["gpt-4.1-2025-04-14", "o4-mini"])
        self.assertEqual(models[0]["context"], None)  # no hints: the server did not say
        (request,) = self.model.requests
        self.assertEqual((request.path, request.headers.get("authorization")), ("/v1/models", None))

    async def test_available_groq_skips_inactive_and_audio(self):
        """Groq: context_window; inactive and whisper models are left out."""
        self.model.serve_models("groq_models")
        models = await self.available(url=self.model.url, kind="groq", key=KEY)
        self.assertEqual(models, [model("openai/gpt-oss-120b", context=131072, tools=True, reasoning=True),
                                  model("llama-3.3-70b-versatile", context=131072, tools=True, reasoning=False)])

    async def test_available_mistral_reads_capabilities(self):
        """Mistral: function_calling and max_context_length; non-chat models are left out."""
        self.model.serve_models("mistral_models")
        models = await self.available(url=self.model.url, kind="mistral", key=KEY)
        self.assertEqual(models, [model("mistral-large-latest", "mistral-large-2512", 262144, tools=True)])

    async def test_available_together_bare_array(self):
        """Together: a bare array; chat models only, with display_name, context_length and the
        price (already USD per million tokens)."""
        self.model.serve_models("together_models")
        models = await self.available(url=self.model.url, kind="together", key=KEY)
        self.assertEqual(models, [model("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
                                        "Qwen3 Coder 480B A35B Instruct FP8", 262144,
                                        price={"input": 2.0, "output": 2.0})])

    async def test_available_deepseek_hints(self):
        """DeepSeek: ids only; the V4 models think and call tools."""
        self.model.serve_models("deepseek_models")
        models = await self.available(url=self.model.url, kind="deepseek", key=KEY)
        self.assertEqual(models, [model("deepseek-v4-flash", tools=True, reasoning=True),
                                  model("deepseek-v4-pro", tools=True, reasoning=True)])

    async def test_available_rejected_key_400_redacted(self):
        """A 401 is a 400 on field key; a key echoed by the provider is redacted."""
        self.model.serve_json("GET", "/v1/models", {"error": {
            "message": f"Incorrect API key provided: {KEY}.", "type": "invalid_request_error",
            "code": "invalid_api_key"}}, status=401)
        answer = await self.ask("providers_available", {"url": self.model.url, "kind": "openai", "key": KEY})
        self.assertEqual(answer.status, 400)
        [error] = answer.json()
        self.assertEqual(error["name"], "key")
        self.assertIn("rejected the API key (401)", error["error"])
        self.assertIn("[key]", error["error"])

    async def test_available_unreachable_400_url(self):
        """A provider that cannot be reached is a 400 on field url with the reason."""
        answer = await self.ask("providers_available", {"url": closed_port_url(), "kind": "openai"})
        self.assertEqual(answer.status, 400)
        [error] = answer.json()
        self.assertEqual(error["name"], "url")
        self.assertIn("connection refused", error["error"])

    async def test_available_not_a_models_list_400(self):
        """An answer that is not a models list is a 400, not a 500."""
        self.model.serve_json("GET", "/v1/models", {"object": "list", "data": "nothing"})
        answer = await self.ask("providers_available", {"url": self.model.url, "kind": "openai"})
        self.assertEqual(answer.status, 400)
        self.assertEqual(answer.json()[0]["name"], "url")

    async def test_available_saved_id_overrides_url(self):
        """With id, the stored key goes to the URL given beside it (an edit form's check)."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=closed_port_url(), key=KEY)
        models = await self.available(id=saved["id"], url=self.model.url)
        self.assertEqual(len(models), 2)
        self.assertEqual(self.model.requests[-1].headers["authorization"], f"Bearer {KEY}")

    async def test_available_invalid_body_400(self):
        """Without id, url and kind are required; an unknown id is 404; GET is 405."""
        answer = await self.ask("providers_available", {"key": KEY})
        self.assertEqual(answer.status, 400)
        self.assertEqual([e["name"] for e in answer.json()], ["url", "kind"])
        answer = await self.ask("providers_available", {"id": "nope"})
        self.assertEqual(answer.status, 404)
        # An optional field that is null is absent: url and kind must still be there.
        for given, missing in (({"url": None, "kind": "openai"}, "url"), ({"url": self.model.url, "kind": None}, "kind")):
            answer = await self.ask("providers_available", given)
            self.assertEqual(answer.status, 400, given)
            self.assertEqual([e["name"] for e in answer.json()], [missing], given)
        answer = await self.ask("providers_available", method="GET")
        self.assertEqual(answer.status, 405)


class DetectTest(ProvidersCase):
    async def test_detect_finds_local_server(self):
        """Detect answers the local server that answers, with its models, and skips closed and
        silent ports without hanging."""
        self.model.serve_models("ollama_api_tags", "ollama_api_show")
        silent = socket.socket()
        self.addCleanup(silent.close)
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # accepts connections in the kernel, never answers
        silent_url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        # The running app's Providers, which the service holds: every local kind is probed here.
        self.app.providers.detect_urls = {
            "ollama": self.model.base, "llamacpp": closed_port_url(), "lmstudio": silent_url}
        async with asyncio.timeout(4000 * MS):
            answer = await self.ask("providers_detect")
        self.assertEqual(answer.status, 200)
        [found] = answer.json()
        self.assertEqual((found["id"], found["kind"], found["url"], found["name"], found["providerid"]),
                         ("ollama", "ollama", self.model.base, "Ollama", None))
        self.assertEqual([m["id"] for m in found["models"]], ["qwen3-coder:30b", "gpt-oss:20b"])
        saved = await self.save(name="Ollama", kind="ollama", url=self.model.base)
        [found] = (await self.ask("providers_detect")).json()
        self.assertEqual(found["providerid"], saved["id"])


class CatalogTest(ProvidersCase):
    async def test_catalog_failing_provider_listed_with_error(self):
        """One provider that answers and one that does not: the catalog has the models of the
        first and the reason of the second."""
        self.model.serve_models("openai_v1_models")
        good = await self.save(name="Good", kind="openai", url=self.model.url, key=KEY)
        bad = await self.save(name="Down", kind="groq", url=closed_port_url() + "/v1", key=OTHER_KEY)
        answer = await self.ask("providers_catalog")
        self.assertEqual(answer.status, 200)
        catalog = answer.json()
        self.assertEqual([(p["id"], p["name"], p["icon"]) for p in catalog["providers"]],
                         [(good["id"], "Good", "openai"), (bad["id"], "Down", "groq")])
        self.assertIsNone(catalog["providers"][0]["error"])
        self.assertIn("connection refused", catalog["providers"][1]["error"])
        self.assertEqual(catalog["models"], [
            {"id": f"{good['id']}/gpt-4.1-2025-04-14", "provider": {"id": good["id"], "name": "Good", "icon": "openai"},
             "model": "gpt-4.1-2025-04-14", "name": "gpt-4.1-2025-04-14", "context": 1047576,
             "contextguessed": False, "tools": True, "reasoning": False, "free": False, "price": None},
            {"id": f"{good['id']}/o4-mini", "provider": {"id": good["id"], "name": "Good", "icon": "openai"},
             "model": "o4-mini", "name": "o4-mini", "context": 200000, "contextguessed": False, "tools": True,
             "reasoning": True, "free": False, "price": None},
        ])
        models = await self.ask("providers_models")
        self.assertEqual(models.status, 200)
        self.assertEqual(models.json(), catalog["models"])

    async def test_catalog_cached_until_provider_changes(self):
        """The models list is fetched once within the TTL, and again after the provider changes."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        await self.ask("providers_catalog")
        await self.ask("providers_models")
        self.assertEqual(len(self.requests_to("/v1/models")), 1)
        await self.save(id=saved["id"], name="OpenAI", kind="openai", url=self.model.url)
        await self.ask("providers_catalog")
        self.assertEqual(len(self.requests_to("/v1/models")), 2)

    async def test_catalog_chosen_models_only(self):
        """A provider saved with a choice of models offers only those."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY, models=["o4-mini"])
        self.assertEqual(saved["models"], ["o4-mini"])
        models = (await self.ask("providers_models")).json()
        self.assertEqual([m["id"] for m in models], [f"{saved['id']}/o4-mini"])

    async def test_catalog_empty_without_providers(self):
        """Without providers the catalog is empty."""
        self.assertEqual((await self.ask("providers_catalog")).json(), {"providers": [], "models": []})


class TargetTest(ProvidersCase):
    async def test_target_ollama_native_with_num_ctx(self):
        """Ollama: the native /api/chat, with num_ctx = the model's window (/api/show) capped at 32768."""
        self.model.serve_models("ollama_api_show")
        saved = await self.save(name="Ollama", kind="ollama", url=self.model.base + "/")
        target = await self.app.providers.target(f"{saved['id']}/qwen3-coder:30b")
        self.assertEqual(target, ProviderTarget(saved["id"], self.model.base + "/api/chat", "qwen3-coder:30b",
                                                kind_named("ollama"), key=None, context=MAX_OLLAMA_NUM_CTX))
        self.assertEqual(self.requests_to("/api/show")[0].body, {"model": "qwen3-coder:30b"})

    async def test_target_ollama_small_model_keeps_window(self):
        """An Ollama model with a window under the cap gets exactly its window."""
        show = copy.deepcopy(models_fixture("ollama_api_show"))
        show["model_info"]["qwen3moe.context_length"] = 8192
        self.model.serve_json("POST", "/api/show", show)
        saved = await self.save(name="Ollama", kind="ollama", url=self.model.base, key=KEY)
        target = await self.app.providers.target(f"{saved['id']}/small:1b")
        self.assertEqual((target.context, target.key), (8192, KEY))

    async def test_target_ollama_window_from_parameters(self):
        """An /api/show without a trained window: the Modelfile's `num_ctx` parameter is the window."""
        show = copy.deepcopy(models_fixture("ollama_api_show"))
        show["model_info"] = {"general.architecture": "llama"}
        show["parameters"] = "stop \"<|im_end|>\"\nnum_ctx 16384\ntemperature 0.7"
        self.model.serve_json("POST", "/api/show", show)
        saved = await self.save(name="Ollama", kind="ollama", url=self.model.base)
        target = await self.app.providers.target(f"{saved['id']}/custom:7b")
        self.assertEqual(target.context, 16384)

    async def test_target_ollama_cached_window_no_show(self):
        """After the catalog has described an Ollama model, a target asks /api/show no more."""
        self.model.serve_models("ollama_api_tags", "ollama_api_show")
        saved = await self.save(name="Ollama", kind="ollama", url=self.model.base)
        await self.ask("providers_catalog")
        shows = len(self.requests_to("/api/show"))
        target = await self.app.providers.target(f"{saved['id']}/gpt-oss:20b")
        self.assertEqual(target.context, MAX_OLLAMA_NUM_CTX)
        self.assertEqual(len(self.requests_to("/api/show")), shows)

    async def test_target_openai_kind_chat_endpoint(self):
        """An OpenAI-style provider: its chat/completions endpoint, the decrypted key, no options."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        target = await self.app.providers.target(f"{saved['id']}/o4-mini")
        self.assertEqual((target.url, target.model, target.key, target.kind, target.context),
                         (self.model.chat_url, "o4-mini", KEY, kind_named("openai"), None))
        self.assertEqual(self.model.requests, [])  # a run's first request is its chat
        self.assertNotIn(KEY, repr(target))
        self.assertNotIn(KEY, str(target))

    async def test_target_compatible_kind_saved_without_key(self):
        """An OpenAI-compatible provider saved without a key: called on {url}/chat/completions of
        its URL, without a key, with the OpenAI-compatible default window as a guess."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="Gateway", kind="compatible", url=self.model.url)
        self.assertEqual((saved["kind"], saved["haskey"]), ("compatible", False))
        target = await self.app.providers.target(f"{saved['id']}/o4-mini")
        self.assertEqual((target.url, target.key, target.kind), (self.model.chat_url, None, kind_named("compatible")))
        catalog = (await self.ask("providers_catalog")).json()
        self.assertEqual(catalog["providers"][0]["kind"], "compatible")
        entry = next(m for m in catalog["models"] if m["model"] == "o4-mini")
        self.assertEqual((entry["context"], entry["contextguessed"]), (32768, True))

    async def test_target_context_from_cached_catalog(self):
        """Once the catalog has read the models, a target carries the model's window."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        await self.ask("providers_catalog")
        target = await self.app.providers.target(f"{saved['id']}/o4-mini")
        self.assertEqual(target.context, 200000)
        self.assertEqual(len(self.model.requests), 1)

    async def test_target_local_server_uses_v1(self):
        """llama.cpp and LM Studio are called on /v1/chat/completions of their root URL."""
        for kind in ("llamacpp", "lmstudio"):
            saved = await self.save(name=kind, kind=kind, url=self.model.base)
            target = await self.app.providers.target(f"{saved['id']}/some-model")
            self.assertEqual((target.url, target.kind), (self.model.chat_url, kind_named(kind)))

    async def test_target_model_id_with_slash(self):
        """The reference splits on the first "/": OpenRouter ids keep theirs."""
        self.model.serve_models("openrouter_api_v1_models")
        saved = await self.save(name="OpenRouter", kind="openrouter", url=self.model.url, key=KEY)
        await self.ask("providers_catalog")
        target = await self.app.providers.target(f"{saved['id']}/qwen/qwen3-coder:free")
        self.assertEqual((target.model, target.context, target.kind),
                         ("qwen/qwen3-coder:free", 262000, kind_named("openrouter")))
        self.assertEqual(target.kind.stream_request({})[0]["X-Title"], "Totem")

    async def test_target_provider_down_still_answers(self):
        """A provider whose models list fails still gives a target, without a context window."""
        saved = await self.save(name="Down", kind="openai", url=closed_port_url() + "/v1", key=KEY)
        target = await self.app.providers.target(f"{saved['id']}/gpt-4.1")
        self.assertEqual((target.model, target.context, target.key), ("gpt-4.1", None, KEY))

    async def test_target_bad_reference_raises_model_error(self):
        """A malformed reference or an unknown provider raises ModelError: a ProviderError that is
        not retried and not an API error (the prompt service answers it as a 400 on model)."""
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        for reference in ("no-slash", "/model", f"{saved['id']}/", "unknown/model", "", None):
            with self.subTest(reference=reference), self.assertRaises(ModelError) as caught:
                await self.app.providers.target(reference)
            error = caught.exception
            self.assertIsInstance(error, ProviderError)
            self.assertNotIsInstance(error, ApiError)
            self.assertEqual((error.status, error.kind, error.retry), (None, KIND_INVALID_REQUEST, False))
            self.assertTrue(error.message)
            self.assertNotIn(KEY, repr(error))
        answer = await call(self.app, "sessions_prompt", {"text": "x", "model": "unknown/model"},
                            ident=(await self.create_session((await self.open_project())["id"]))["id"])
        self.assertEqual(answer.status, 400)
        [entry] = answer.json()
        self.assertEqual(entry["name"], "model")
        self.assertIn("there is no provider unknown", entry["error"])


class PriceTest(ProvidersCase):
    async def test_catalog_and_target_carry_the_price(self):
        """The catalog shows each model's price; a target carries it (for the cost of its answers),
        also once the cached list is older than its TTL, with the window, while the provider is
        unchanged: a run started long after the catalog was read keeps the real window."""
        self.model.serve_models("openrouter_api_v1_models")
        saved = await self.save(name="OpenRouter", kind="openrouter", url=self.model.url, key=KEY)
        models = (await self.ask("providers_models")).json()
        self.assertEqual([(m["model"], m["price"]) for m in models],
                         [("qwen/qwen3-coder", {"input": 0.22, "output": 0.95, "cacheread": 0.022}),
                          ("qwen/qwen3-coder:free", {"input": 0.0, "output": 0.0}),
                          ("deepseek/deepseek-r1-0528", {"input": 0.5, "output": 2.15})])
        target = await self.app.providers.target(f"{saved['id']}/deepseek/deepseek-r1-0528")
        self.assertEqual((target.context, target.price), (163840, {"input": 0.5, "output": 2.15}))
        self.app.providers.ttl = 0  # every list is stale at once
        await self.save(id=saved["id"], name="OpenRouter", kind="openrouter", url=self.model.url)
        await self.ask("providers_models")
        lists = len(self.requests_to("/v1/models"))
        target = await self.app.providers.target(f"{saved['id']}/qwen/qwen3-coder")
        self.assertEqual((target.context, target.price), (262144, {"input": 0.22, "output": 0.95, "cacheread": 0.022}))
        self.assertEqual(len(self.requests_to("/v1/models")), lists)  # no list is fetched for a target

    async def test_a_model_without_a_price_has_none(self):
        """A provider that publishes no prices (OpenAI's list) gives `price: null`, and so does a
        target of a model that is not in the list."""
        self.model.serve_models("openai_v1_models")
        saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
        self.assertEqual({m["price"] for m in (await self.ask("providers_models")).json()}, {None})
        self.assertIsNone((await self.app.providers.target(f"{saved['id']}/not-listed")).price)


PRICES = [  # (prompt, completion, per tokens) as a provider says them -> the price per million tokens
    ("0.00000022", "0.00000095", 1, {"input": 0.22, "output": 0.95}),  # OpenRouter: strings per token
    ("0", "0", 1, {"input": 0.0, "output": 0.0}),  # a free model
    (0.88, 0.88, 1_000_000, {"input": 0.88, "output": 0.88}),  # Together: numbers per 1M tokens
    (2, 2, 1_000_000, {"input": 2.0, "output": 2.0}),
    ("-1", "-1", 1, None),  # OpenRouter's router: the price varies
    ("0.000001", None, 1, None),  # half a price is no price
    (None, None, 1, None),
    ("abc", "0.1", 1, None),
    (True, 1, 1, None),
    (float("nan"), 1, 1, None),
    ("1e400", "1", 1, None),  # not a price a float can hold
    ({"usd": 1}, 1, 1, None),
]


def test_price_of_reads_the_shapes_providers_send():
    """Prices are kept in USD per million tokens; anything that is not a non-negative number for
    both input and output is no price at all."""
    for prompt, completion, per_tokens, expected in PRICES:
        assert price_of(prompt, completion, per_tokens) == expected, (prompt, completion)


def test_kinds_read_the_price_of_their_fixture():
    """The models fixtures of OpenRouter and Together, read by their kinds."""
    fetch = Fetch("http://127.0.0.1:1/v1", None, 1.0)
    openrouter = kind_named("openrouter").read_models(models_fixture("openrouter_api_v1_models"), fetch)
    assert [m["price"] for m in openrouter] == [{"input": 0.22, "output": 0.95, "cacheread": 0.022}, {"input": 0.0, "output": 0.0},
                                                 {"input": 0.5, "output": 2.15}]
    together = kind_named("together").read_models(models_fixture("together_models"), fetch)
    assert [(m["id"], m["price"]) for m in together] == [("Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
                                                          {"input": 2.0, "output": 2.0})]
    [entry] = copy.deepcopy(models_fixture("together_models"))[:1]
    del entry["pricing"]
    assert kind_named("together").read_models([entry], fetch)[0]["price"] is None


class SecrecyTest(ProvidersCase):
    async def test_key_never_logged(self):
        """Saving, using, failing and listing a provider writes no log line holding the key."""
        records: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record):
                records.append(self.format(record))

        handler = Keep(logging.DEBUG)
        handler.setFormatter(logging.Formatter("%(message)s %(exc_text)s"))
        root = logging.getLogger()
        previous = root.level
        root.addHandler(handler)
        root.setLevel(logging.DEBUG)
        try:
            self.model.serve_json("GET", "/v1/models", {"error": {"message": f"bad key {KEY}"}}, status=401)
            saved = await self.save(name="OpenAI", kind="openai", url=self.model.url, key=KEY)
            await self.ask("providers_available", {"id": saved["id"]})
            await self.ask("providers_catalog")
            await self.app.providers.target(f"{saved['id']}/gpt-4.1")
            await self.ask("providers_save", {"name": "x", "kind": "openai", "url": "ftp://x", "key": KEY})
        finally:
            root.removeHandler(handler)
            root.setLevel(previous)
        self.assertFalse([line for line in records if KEY in line])
        catalog = (await self.ask("providers_catalog")).json()
        self.assertIn("[key]", catalog["providers"][0]["error"])

    async def test_repr_hides_key(self):
        """repr() of the providers service, the vault and a target never shows a key."""
        saved = await self.save(name="OpenAI", kind="openai", url=closed_port_url(), key=KEY)
        target = await self.app.providers.target(f"{saved['id']}/m")
        for thing in (self.app.providers, self.app.vault, target):
            self.assertNotIn(KEY, repr(thing))
