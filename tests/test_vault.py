"""The vault: provider keys encrypted at rest, and the secret they are encrypted under."""

import os
import shutil
import stat
import tempfile
import unittest

from totem.app import App
from totem.config import parse_values
from totem.security.vault import NONCE_BYTES, SECRET_FILE, TAG_BYTES, VERSION, Vault, VaultError

SECRET = "a-configured-secret-of-some-length"
OTHER_SECRET = "another-configured-secret-entirely"
KEY = "sk-or-v1-0123456789abcdef0123456789abcdef"


class VaultCase(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="totem-vault-"))
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.data = os.path.join(self.tmp, "data")

    def config(self, secret: str = ""):
        return parse_values({"data": self.data, "secret": secret}, self.tmp)

    @property
    def secret_path(self) -> str:
        return os.path.join(self.data, SECRET_FILE)


class EncryptionTest(VaultCase):
    def test_vault_round_trip_returns_text(self):
        """A value decrypts to the text it was made from, Unicode included."""
        vault = Vault.open(self.config(SECRET))
        for text in (KEY, "", "clé-ключ-鍵"):
            self.assertEqual(vault.decrypt(vault.encrypt(text)), text)

    def test_vault_encrypt_format_versioned_and_random(self):
        """A value is version byte, 12-byte nonce and sealed text; two encryptions differ."""
        vault = Vault.open(self.config(SECRET))
        first, second = vault.encrypt(KEY), vault.encrypt(KEY)
        self.assertEqual(first[0], VERSION)
        self.assertEqual(len(first), 1 + NONCE_BYTES + len(KEY.encode()) + TAG_BYTES)
        self.assertNotEqual(first, second)
        self.assertNotEqual(first[1:1 + NONCE_BYTES], second[1:1 + NONCE_BYTES])
        self.assertNotIn(KEY.encode(), first)

    def test_vault_decrypt_wrong_secret_raises(self):
        """A value made under another secret raises VaultError naming the secret, not the value."""
        blob = Vault.open(self.config(SECRET)).encrypt(KEY)
        with self.assertRaises(VaultError) as caught:
            Vault.open(self.config(OTHER_SECRET)).decrypt(blob)
        message = str(caught.exception)
        self.assertIn("secret", message)
        self.assertNotIn(KEY, message)
        self.assertNotIn(SECRET, message)

    def test_vault_decrypt_damaged_value_raises(self):
        """A truncated, flipped or unknown-version value raises VaultError."""
        vault = Vault.open(self.config(SECRET))
        blob = vault.encrypt(KEY)
        flipped = blob[:-1] + bytes((blob[-1] ^ 1,))
        for damaged in (blob[:10], b"", bytes((9,)) + blob[1:], flipped):
            with self.subTest(damaged=damaged[:4]), self.assertRaises(VaultError):
                vault.decrypt(damaged)

    def test_vault_repr_hides_secret(self):
        """repr() of a vault shows no secret material."""
        vault = Vault.open(self.config(SECRET))
        self.assertNotIn(SECRET, repr(vault))
        self.assertEqual(repr(vault), f"<Vault v{VERSION}>")

    def test_vault_short_secret_refused(self):
        """A secret shorter than 16 characters is refused."""
        with self.assertRaises(VaultError):
            Vault("too-short")


class SecretFileTest(VaultCase):
    def test_vault_secret_file_created_private(self):
        """Without a configured secret, <data>/secret.key is created with mode 0600."""
        previous = os.umask(0)  # a permissive umask must not loosen the file
        try:
            Vault.open(self.config())
        finally:
            os.umask(previous)
        info = os.stat(self.secret_path)
        self.assertEqual(stat.S_IMODE(info.st_mode), 0o600)
        self.assertEqual(info.st_uid, os.getuid())
        with open(self.secret_path) as handle:
            self.assertGreaterEqual(len(handle.read().strip()), 32)
        self.assertEqual(os.listdir(self.data), [SECRET_FILE])  # no temporary file left behind

    def test_vault_secret_file_reused(self):
        """A second start reads the same secret: values saved before still decrypt."""
        blob = Vault.open(self.config()).encrypt(KEY)
        with open(self.secret_path) as handle:
            before = handle.read()
        self.assertEqual(Vault.open(self.config()).decrypt(blob), KEY)
        with open(self.secret_path) as handle:
            self.assertEqual(handle.read(), before)

    def test_vault_configured_secret_writes_no_file(self):
        """With `secret` in the configuration no file is created."""
        Vault.open(self.config(SECRET))
        self.assertFalse(os.path.exists(self.secret_path))

    def test_vault_secret_file_loose_mode_refused(self):
        """A secret.key that others can read stops the start with the chmod to run."""
        Vault.open(self.config())
        os.chmod(self.secret_path, 0o644)
        with self.assertRaises(VaultError) as caught:
            Vault.open(self.config())
        self.assertIn("chmod 600", str(caught.exception))
        self.assertIn(self.secret_path, str(caught.exception))
        self.assertEqual(stat.S_IMODE(os.stat(self.secret_path).st_mode), 0o644)  # refused, not changed

    def test_vault_secret_file_symlink_refused(self):
        """A secret.key that is a symbolic link is refused."""
        os.makedirs(self.data)
        target = os.path.join(self.tmp, "elsewhere")
        with open(target, "w") as handle:
            handle.write("x" * 64)
        os.chmod(target, 0o600)
        os.symlink(target, self.secret_path)
        with self.assertRaises(VaultError) as caught:
            Vault.open(self.config())
        self.assertIn("symbolic link", str(caught.exception))

    def test_vault_secret_file_empty_refused(self):
        """An empty or short secret.key is reported as damaged, not silently replaced."""
        os.makedirs(self.data)
        fd = os.open(self.secret_path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        with self.assertRaises(VaultError) as caught:
            Vault.open(self.config())
        self.assertIn("damaged", str(caught.exception))

    def test_vault_secret_file_contents_not_in_message(self):
        """The refusal of a loose file does not quote the secret."""
        Vault.open(self.config())
        with open(self.secret_path) as handle:
            secret = handle.read().strip()
        os.chmod(self.secret_path, 0o640)
        with self.assertRaises(VaultError) as caught:
            Vault.open(self.config())
        self.assertNotIn(secret, str(caught.exception))

    def test_app_loose_secret_file_refused(self):
        """The app does not start on a secret.key that others can read."""
        Vault.open(self.config())
        os.chmod(self.secret_path, 0o604)
        with self.assertRaises(VaultError):
            App(self.config())
