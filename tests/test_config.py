"""Reading config.ini: defaults, types, ranges and the refusals that stop the start."""

import os
import tempfile
import unittest

from totem.config import KEYS, Config, ConfigError, default_config_path, load_config, parse_values

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ConfigTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def write(self, text: str) -> str:
        path = os.path.join(self.tmp.name, "config.ini")
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def test_defaults_loopback_no_token(self):
        """Without a file's values Totem listens on 127.0.0.1 without a token, data beside the file."""
        config = load_config(self.write("[totem]\n"))
        self.assertEqual(config.listen, "127.0.0.1")
        self.assertEqual(config.token, "")
        self.assertEqual(config.data, os.path.join(self.tmp.name, "data"))
        self.assertEqual(config.port, 8470)

    def test_shipped_config_matches_defaults(self):
        """The config.ini in the repository is valid and every key in it has a comment."""
        config = load_config(os.path.join(ROOT, "config.ini"))
        self.assertEqual(config.listen, "127.0.0.1")
        with open(os.path.join(ROOT, "config.ini")) as handle:
            lines = handle.read().splitlines()
        for key in KEYS:
            index = next(i for i, line in enumerate(lines) if line.startswith(f"{key.name} ="))
            self.assertTrue(lines[index - 1].startswith("#"), key.name)

    def test_every_key_in_config_dataclass(self):
        """KEYS and the Config fields agree."""
        self.assertEqual([k.name for k in KEYS] + ["rules", "source"], list(Config.__dataclass_fields__))

    def test_bad_values_name_key(self):
        """A bad value stops with one line naming the key and what is allowed."""
        cases = {
            "port = 70000": "'port' must be a whole number from 0 to 65535",
            "port = abc": "'port' must be a whole number from 0 to 65535",
            "listen = example.com": "'listen' must be an IP address",
            "cookiesecure = maybe": "'cookiesecure' must be true or false",
            "token = short": "'token' must be empty (no login) or at least 16 characters",
            "forgeurl = ftp://x": "'forgeurl' must be an http or https URL",
            "failures = 0": "'failures' must be a whole number from 1 to 1000",
            "proxy = nowhere": "'proxy' must be an IP address",
        }
        for line, message in cases.items():
            with self.assertRaises(ConfigError, msg=line) as caught:
                load_config(self.write(f"[totem]\n{line}\n"))
            self.assertIn(message, str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))

    def test_bad_secret_value_not_echoed(self):
        """A bad token or secret stops the start without its value in the message."""
        for line, value in (("token = short-tok", "short-tok"), ("token = has a space in it at all", "has a space"),
                            ("secret = tiny-secret", "tiny-secret")):
            with self.assertRaises(ConfigError, msg=line) as caught:
                load_config(self.write(f"[totem]\n{line}\n"))
            self.assertIn(f"'{line.split()[0]}' must be", str(caught.exception))
            self.assertNotIn(value, str(caught.exception))

    def test_unknown_key_refused(self):
        """A misspelt key is refused rather than silently ignored."""
        with self.assertRaises(ConfigError) as caught:
            load_config(self.write("[totem]\nlisten_address = 0.0.0.0\n"))
        self.assertIn("unknown key 'listen_address'", str(caught.exception))

    def test_public_listen_needs_token(self):
        """Listening beyond loopback without a token is refused; with one it is allowed."""
        with self.assertRaises(ConfigError) as caught:
            parse_values({"listen": "0.0.0.0"}, self.tmp.name)
        self.assertIn("set 'token'", str(caught.exception))
        config = parse_values({"listen": "0.0.0.0", "token": "x" * 20}, self.tmp.name)
        self.assertEqual(config.listen, "0.0.0.0")
        self.assertEqual(parse_values({"listen": "::1"}, self.tmp.name).listen, "::1")

    def test_missing_named_file_refused(self):
        """A --config path that does not exist is an error; the default file may be absent."""
        with self.assertRaises(ConfigError):
            load_config(os.path.join(self.tmp.name, "absent.ini"))
        self.assertTrue(default_config_path().endswith("config.ini"))

    def test_malformed_file_one_line(self):
        """A file that is not INI stops with one line."""
        with self.assertRaises(ConfigError) as caught:
            load_config(self.write("listen = 1\n"))
        self.assertNotIn("\n", str(caught.exception))

    def test_absolute_data_kept(self):
        """An absolute data folder is used as given."""
        config = parse_values({"data": "/var/lib/totem"}, self.tmp.name)
        self.assertEqual(config.data, "/var/lib/totem")


class RulesSectionTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def load(self, text: str):
        path = os.path.join(self.tmp.name, "config.ini")
        with open(path, "w") as handle:
            handle.write(text)
        return load_config(path)

    def test_rules_section_parsed(self):
        """[rules] lines become (tool, pattern, action); a pattern may hold ':' and spaces."""
        config = self.load("[totem]\n[rules]\nno-force = deny bash git push --force*\n"
                           "docs = allow read docs/**\nlog = allow bash git log --format=%h:%s *\n")
        self.assertEqual(config.rules, (("bash", "git push --force*", "deny"), ("read", "docs/**", "allow"),
                                        ("bash", "git log --format=%h:%s *", "allow")))

    def test_bad_rules_one_line(self):
        """A rule that is not ACTION TOOL PATTERN, or an invalid pattern, stops the start naming it."""
        for line in ("x = maybe bash ls", "x = allow", "x = allow bash"):
            with self.assertRaises(ConfigError, msg=line) as caught:
                self.load(f"[totem]\n[rules]\n{line}\n")
            self.assertIn("rule 'x'", str(caught.exception))
            self.assertNotIn("\n", str(caught.exception))
