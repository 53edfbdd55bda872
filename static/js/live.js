// The dashboard's live socket (/ws/runs/<id>/, webapp/live/protocol.py): connects, reconnects with backoff,
// handles coalesced batches frame by frame, and sends "resume" for the series whose history is in — batched, so a
// page revealing forty series sends one resume, not forty (the server rate-limits client messages).
"use strict";

window.Obs = window.Obs || {};

(function (Obs) {
  const RESUME_CHUNK = 200; // protocol.MAX_RESUME_METRICS is 256

  class LiveSocket {
    // store: Obs.Store; lastEvent(): the last event id the page holds; handle(frame): one server frame.
    constructor(runId, store, lastEvent, handle, status) {
      this.runId = runId; this.store = store; this.lastEvent = lastEvent; this.handle = handle;
      this.status = status; // (text) -> shown in the header
      this.ws = null; this.attempts = 0; this.pending = new Set(); this.flushQueued = false;
    }

    open() { return this.ws && this.ws.readyState === WebSocket.OPEN; }

    // History for these series is in: subscribe them (with the next microtask's others).
    ready(names) {
      if (!this.open()) return; // onopen resumes everything ready
      names.forEach((n) => this.pending.add(n));
      if (this.flushQueued) return;
      this.flushQueued = true;
      queueMicrotask(() => { this.flushQueued = false; const n = [...this.pending]; this.pending.clear(); this.resume(n); });
    }

    resume(names) {
      if (!this.open()) return;
      names = names.filter((n) => this.store.has(n) && !this.store.get(n).loading && !this.store.get(n).waiting);
      for (let i = 0; i < names.length; i += RESUME_CHUNK) {
        const chunk = names.slice(i, i + RESUME_CHUNK);
        const after = {};
        for (const name of chunk) after[name] = this.store.get(name).last;
        this.ws.send(JSON.stringify({type: "resume", metrics: chunk, after, after_event: this.lastEvent()}));
      }
    }

    connect() {
      const proto = location.protocol === "https:" ? "wss://" : "ws://";
      const ws = this.ws = new WebSocket(proto + location.host + "/ws/runs/" + encodeURIComponent(this.runId) + "/");
      ws.onopen = () => {
        this.attempts = 0;
        this.status("live");
        const ready = this.store.ready();
        if (ready.length) this.resume(ready);
      };
      ws.onmessage = (ev) => {
        const msg = JSON.parse(ev.data);
        if (Array.isArray(msg)) msg.forEach(this.handle); // a coalesced batch: its frames in order
        else this.handle(msg);
      };
      ws.onclose = (ev) => {
        this.ws = null;
        if (ev.code === 4404) { this.status("run not found"); return; }
        if (ev.code === 4403) { this.status("not allowed"); return; }
        // 4008 too slow, 4012 the server missed an update, 1013 live unavailable, 4429 too many messages, or a
        // dropped connection: reconnect and resume (the backfill fills any hole); jitter spreads a crowd's return.
        const base = ev.code === 4429 ? 5000 : 500;
        const delay = Math.min(10000, base * 2 ** this.attempts++) * (0.75 + Math.random() / 2);
        this.status("reconnecting…");
        setTimeout(() => this.connect(), delay);
      };
    }
  }

  Obs.LiveSocket = LiveSocket;
})(window.Obs);
