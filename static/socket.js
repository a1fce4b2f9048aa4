// The one WebSocket: reconnects with backoff, and subscribes again once the page has reloaded
// the stored state (the protocol's order: Sessions|messages first, then subscribe).
import { CLIENT } from '/events.js';

const FIRST_DELAY_MS = 250;
const MAX_DELAY_MS = 10000;

export class Socket {
  // onEvent(event); onOpen(reconnected) may return a promise: subscriptions wait for it;
  // onState('connecting' | 'open' | 'closed').
  constructor({ onEvent, onOpen, onState }) {
    Object.assign(this, { onEvent, onOpen, onState });
    this.subscriptions = new Set();
    this.ws = null;
    this.ready = false;
    this.attempt = 0;
    this.everOpened = false;
    this.timer = 0;
    // Back online (or the tab woke up): try at once rather than at the end of the backoff.
    window.addEventListener('online', () => this.retryNow());
  }

  retryNow() {
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) return; // connecting or connected
    clearTimeout(this.timer);
    this.attempt = 0;
    this.connect();
  }

  connect() {
    this.onState(this.everOpened ? 'closed' : 'connecting');
    const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws/`);
    this.ws = ws;
    ws.addEventListener('open', async () => {
      const reconnected = this.everOpened;
      this.everOpened = true;
      this.attempt = 0;
      try {
        await this.onOpen(reconnected);
      } finally {
        if (this.ws === ws && ws.readyState === WebSocket.OPEN) {
          this.ready = true;
          for (const id of this.subscriptions) this.send(CLIENT.SUBSCRIBE, id);
          this.onState('open');
        }
      }
    });
    ws.addEventListener('message', (message) => {
      let event;
      try { event = JSON.parse(message.data); } catch { return; }
      this.onEvent(event);
    });
    ws.addEventListener('close', () => {
      if (this.ws !== ws) return;
      this.ready = false;
      this.onState('closed');
      // Exponential backoff with jitter, so that many tabs do not knock at once.
      const delay = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** this.attempt++) * (0.75 + Math.random() / 2);
      this.timer = setTimeout(() => this.connect(), delay);
    });
  }

  send(type, sessionid) {
    if (this.ready && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type, sessionid }));
  }

  subscribe(sessionid) {
    if (this.subscriptions.has(sessionid)) return;
    this.subscriptions.add(sessionid);
    this.send(CLIENT.SUBSCRIBE, sessionid);
  }

  unsubscribe(sessionid) {
    if (!this.subscriptions.delete(sessionid)) return;
    this.send(CLIENT.UNSUBSCRIBE, sessionid);
  }

  // Subscribe again, so that the server sends the session's open parts and questions anew.
  resubscribe(sessionid) {
    if (!this.subscriptions.has(sessionid)) return;
    this.send(CLIENT.UNSUBSCRIBE, sessionid);
    this.send(CLIENT.SUBSCRIBE, sessionid);
  }

  unsubscribeAll() {
    for (const id of [...this.subscriptions]) this.unsubscribe(id);
  }
}
