// Light or dark: the system's preference (prefers-color-scheme), until the person chooses with
// the toggle; the choice is remembered in localStorage, and choosing what the system prefers
// forgets it again (the page follows the system from then on).
//
// A classic script loaded in <head> before the body, so that the first paint has the theme.
(() => {
  const KEY = 'totem.theme';
  const root = document.documentElement;
  const system = window.matchMedia('(prefers-color-scheme: dark)');

  const stored = () => {
    try {
      const value = localStorage.getItem(KEY);
      return value === 'dark' || value === 'light' ? value : null;
    } catch {
      return null; // storage refused: follow the system
    }
  };
  const current = () => stored() ?? (system.matches ? 'dark' : 'light');

  function paint() {
    const theme = current();
    root.dataset.theme = theme;
    const toggle = document.getElementById('theme-toggle');
    if (!toggle) return;
    const dark = theme === 'dark';
    toggle.setAttribute('aria-pressed', String(dark));
    toggle.textContent = dark ? '☀' : '☾';
    toggle.title = `Dark mode ${dark ? 'on' : 'off'}${stored() ? '' : ', as the system prefers'}`;
  }

  function toggle() {
    const next = current() === 'dark' ? 'light' : 'dark';
    try {
      if (next === (system.matches ? 'dark' : 'light')) localStorage.removeItem(KEY);
      else localStorage.setItem(KEY, next);
    } catch {
      root.dataset.theme = next; // not remembered, but shown
      return;
    }
    paint();
  }

  paint();
  system.addEventListener('change', paint);
  window.addEventListener('storage', (event) => { if (event.key === KEY) paint(); }); // another tab chose
  document.addEventListener('DOMContentLoaded', () => {
    document.getElementById('theme-toggle')?.addEventListener('click', toggle);
    paint();
  });
})();
