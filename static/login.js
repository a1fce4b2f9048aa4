// Sign in with the access token; the server sets an HttpOnly cookie.
const form = document.getElementById('login');
const error = document.getElementById('error');

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  error.hidden = true;
  const token = document.getElementById('token').value;
  const response = await fetch('/api/login', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
  });
  if (response.ok) {
    location.href = '/';
    return;
  }
  const problems = await response.json().catch(() => []);
  error.textContent = problems.map((p) => p.error).join('; ') || `Sign-in failed (${response.status})`;
  error.hidden = false;
});
