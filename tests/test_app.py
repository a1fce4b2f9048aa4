"""The composition root's own words: the line the start prints."""

from totem.app import startup_line


def test_startup_line_names_the_login_page_with_a_token():
    """With a token the start-up line says where to sign in; without one, only where Totem listens."""
    url = "http://127.0.0.1:8470"
    assert startup_line(url, token=True) == (
        "Totem is listening on http://127.0.0.1:8470/ (sign in at http://127.0.0.1:8470/login with the access token)")
    assert startup_line(url, token=False) == "Totem is listening on http://127.0.0.1:8470/"
