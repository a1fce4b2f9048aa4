// Sign in with the access token, or with the one-time code of a sign-in address
// (/login?code=..., printed when Totem starts and by `python totem.py token`); the server sets
// an HttpOnly cookie.
const form = document.getElementById('login');
const error = document.getElementById('error');

async function signIn(body) {
  error.hidden = true;
  const response = await fetch('/api/login', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (response.ok) {
    location.replace('/');
    return;
  }
  const problems = await response.json().catch(() => []);
  error.textContent = problems.map((p) => p.error).join('; ') || `Sign-in failed (${response.status})`;
  error.hidden = false;
}

form.addEventListener('submit', (event) => {
  event.preventDefault();
  signIn({ token: document.getElementById('token').value });
});

// The code is used once: it leaves the address bar (and the history) before it is sent.
const code = new URLSearchParams(location.search).get('code');
if (code) {
  history.replaceState(null, '', '/login');
  signIn({ code });
}
