"""Provider keys at rest: AES-256-GCM under a key derived from the configured secret.

Owns the secret (config `secret`, or `<data>/secret.key`, generated on first start readable by
the owner only), the key derivation and the format of an encrypted value:

    version (1 byte) | nonce (12 bytes, random per value) | ciphertext + GCM tag (16 bytes)

The version byte is also the associated data, so a value cannot be re-labelled. Must not: log,
or put a plaintext, the secret or the derived key into a message, an exception or repr(). The
scrubbing of tool output is not here (another concern of this module, added separately).
"""

from __future__ import annotations

import os
import secrets
import stat


VERSION = 1
NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
SECRET_FILE = "secret.key"
SECRET_FILE_MODE = 0o600
GENERATED_SECRET_BYTES = 32
MIN_SECRET_CHARS = 16
MAX_SECRET_FILE_BYTES = 4096
# A provider key is a few hundred characters at most; this bounds what decrypt accepts.
MAX_PLAINTEXT_BYTES = 64 * 1024
# Fixed, public inputs of HKDF (RFC 5869): the salt separates Totem from other users of the same
# secret, the info separates this use (provider keys) from any later one.
HKDF_SALT = b"totem.vault"
HKDF_INFO = b"totem provider keys v1"


class VaultError(RuntimeError):
    """The secret cannot be read or created, or a stored value cannot be decrypted.
    The message is one sentence for the person; it never contains key material."""


class Vault:
    """Encrypts and decrypts provider keys. Build it with `Vault.open(config)`."""

    __slots__ = ("_material", "_aead")

    def __init__(self, secret: str | bytes):
        """Derive the key from a secret (text or bytes). Raises VaultError for a short secret."""
        material = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(material) < MIN_SECRET_CHARS:
            raise VaultError(f"the secret must be at least {MIN_SECRET_CHARS} characters")
        self._material = material
        self._aead = None

    def _cipher(self):
        # cryptography costs ~25 ms and ~9 MB to import: paid on the first key, not at start-up.
        if self._aead is None:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF
            key = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=HKDF_SALT,
                       info=HKDF_INFO).derive(self._material)
            self._aead = AESGCM(key)
        return self._aead

    @classmethod
    def open(cls, config) -> Vault:
        """The vault of a configuration: its `secret`, or else `<data>/secret.key`, created on
        first start. Raises VaultError when the file is unsafe (readable by others, not a regular
        file, another owner), damaged or cannot be read or written."""
        if config.secret:
            return cls(config.secret)
        return cls(load_secret_file(config.data))

    def encrypt(self, text: str) -> bytes:
        """The stored form of `text`: version, random nonce, ciphertext and tag."""
        nonce = os.urandom(NONCE_BYTES)
        header = bytes((VERSION,))
        return header + nonce + self._cipher().encrypt(nonce, text.encode("utf-8"), header)

    def decrypt(self, blob: bytes) -> str:
        """The text of a stored value. Raises VaultError for an unknown version, a damaged value,
        or a value encrypted under another secret."""
        blob = bytes(blob)
        if len(blob) < 1 + NONCE_BYTES + TAG_BYTES or len(blob) > 1 + NONCE_BYTES + TAG_BYTES + MAX_PLAINTEXT_BYTES:
            raise VaultError("a stored key is damaged (wrong length)")
        if blob[0] != VERSION:
            raise VaultError(f"a stored key has an unknown format (version {blob[0]})")
        nonce, sealed = blob[1:1 + NONCE_BYTES], blob[1 + NONCE_BYTES:]
        cipher = self._cipher()
        from cryptography.exceptions import InvalidTag
        try:
            plain = cipher.decrypt(nonce, sealed, blob[:1])
        except InvalidTag:
            raise VaultError("a stored key cannot be decrypted: the secret (config 'secret' or "
                             f"the data folder's {SECRET_FILE}) is not the one it was saved with; "
                             "enter the key again") from None
        try:
            return plain.decode("utf-8")
        except UnicodeDecodeError:
            raise VaultError("a stored key is damaged (not text)") from None

    def __repr__(self) -> str:
        return f"<Vault v{VERSION}>"


def load_secret_file(data_dir: str) -> str:
    """The secret in `<data_dir>/secret.key`, created (mode 0600) when it does not exist.

    A file that others can read is refused rather than fixed, as ssh does with a private key:
    someone may already have copied it, and the person should know. Raises VaultError.
    """
    path = os.path.join(data_dir, SECRET_FILE)
    try:
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        try:
            return _read_secret(path)
        except FileNotFoundError:
            pass
        _create_secret(path)
        return _read_secret(path)
    except FileNotFoundError:
        raise VaultError(f"{path} disappeared while it was being created") from None
    except OSError as exc:
        raise VaultError(f"{path} cannot be used: {exc.strerror or type(exc).__name__}") from None


def _read_secret(path: str) -> str:
    """Raises FileNotFoundError, OSError, VaultError."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        if os.path.islink(path):
            raise VaultError(f"{path} is a symbolic link; it must be a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise VaultError(f"{path} is not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise VaultError(f"{path} belongs to another user; it must be yours, with mode 600")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise VaultError(f"{path} can be read by other users (mode {mode:03o}); "
                             f"run: chmod 600 {path}")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode("ascii").strip()
    except UnicodeDecodeError:
        text = ""
    if len(data) > MAX_SECRET_FILE_BYTES or len(text) < MIN_SECRET_CHARS:
        raise VaultError(f"{path} is damaged: it must hold one line of at least {MIN_SECRET_CHARS} "
                         "characters (removing it makes a new one, and stored provider keys must "
                         "then be entered again)")
    return text


def _create_secret(path: str) -> None:
    """Write a new secret atomically: a private temporary file, then a hard link to the final
    name, which never replaces a secret that another process created meanwhile. Raises OSError."""
    temporary = f"{path}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temporary, flags, SECRET_FILE_MODE)
    try:
        try:
            os.fchmod(fd, SECRET_FILE_MODE)  # the umask can only remove bits; be exact anyway
            os.write(fd, (secrets.token_hex(GENERATED_SECRET_BYTES) + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another start won the race: use its secret
    finally:
        os.unlink(temporary)
