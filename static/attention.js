// What needs the person while they are elsewhere (another tab, another window): a question that
// waits, a run that ends. The tab's title carries a mark until they come back, and when the
// browser allows it a notification says what happened; clicking it opens the session. The
// browser's permission is asked once, at the first prompt the person sends (a click of theirs),
// never on its own; a refusal is kept by the browser and never asked again.
const ASKED_KEY = 'totem.notifications.asked';
const ENDED_WORDS = { idle: 'finished', error: 'stopped with an error', aborted: 'was stopped' };

export class Attention {
  constructor({ onChange, onOpen }) {
    this.onChange = onChange; // () -> repaint the title
    this.onOpen = onOpen; // (sessionid) -> show that session
    this.ended = 0; // runs that ended while the person was away
    this.told = new Set(); // the questions already notified (they are sent again on subscribe)
    const back = () => this.seen();
    document.addEventListener('visibilitychange', back);
    window.addEventListener('focus', back);
  }

  away() {
    return document.visibilityState === 'hidden' || !document.hasFocus();
  }

  // The person sent a prompt: the one moment to ask for notifications, once.
  askOnce() {
    if (!('Notification' in window) || Notification.permission !== 'default') return;
    try {
      if (localStorage.getItem(ASKED_KEY)) return;
      localStorage.setItem(ASKED_KEY, '1');
    } catch { /* storage off: asked at most once per page */ }
    Promise.resolve(Notification.requestPermission()).catch(() => {});
  }

  // A question of `session` waits (`id`: the question's, `what`: its words).
  question(session, id, what) {
    if (this.told.has(id) || !this.away()) return;
    this.told.add(id);
    this.notify(`Totem asks in “${session?.name ?? 'a session'}”`, what, session?.id, `question-${id}`);
  }

  // A run of `session` went from running to `status`.
  runEnded(session, status) {
    if (!this.away()) return;
    this.ended += 1;
    this.onChange();
    this.notify(`“${session.name}” ${ENDED_WORDS[status] ?? status}`, '', session.id, `run-${session.id}`);
  }

  // The title's mark: "✓ " while runs ended unseen.
  mark() {
    return this.ended ? '✓ ' : '';
  }

  seen() {
    if (this.away() || !this.ended) return;
    this.ended = 0;
    this.onChange();
  }

  notify(title, body, sessionid, tag) {
    if (!('Notification' in window) || Notification.permission !== 'granted') return;
    try {
      const shown = new Notification(title, { body, tag });
      shown.onclick = () => {
        window.focus();
        if (sessionid) this.onOpen(sessionid);
        shown.close();
      };
    } catch { /* a browser that only notifies from a service worker: the title's mark stays */ }
  }
}
