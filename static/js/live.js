// The dashboard's live socket (/ws/runs/<id>/, webapp/live/protocol.py): reconnects with backoff, handles coalesced
// batches frame by frame, and sends "resume" (batched: the server rate-limits client messages) for the series whose
// history is in. With a push tier (page data `live_push`, webapp/live/relay.py) the same frames come from nchan: a
// reconnect asks for what followed nchan's last id, and series whose history comes later replay the recent frames
// kept here. A page starts on the run's lite channel and moves to the full one once it wants another series. Both
// roads carry the live log's numbered frames ("seq", webapp/live/livelog.py): one hole check (take) for both; a
// hole or a "gap" frame makes the page refetch its windows over HTTP.
"use strict";

(function (Obs) {
  const RESUME_CHUNK = 200; // protocol.MAX_RESUME_METRICS is 256
  const RECENT = 300; // push tier: frames kept for series whose history arrives later (a minute at 5 steps/s)

  // A ws+meta.nchan message -> {id, data}: "id: <id>\ncontent-type: ...\n\n<data>".
  function nchanMessage(text) {
    const cut = text.indexOf("\n\n");
    const head = cut < 0 ? "" : text.slice(0, cut);
    const id = /^id: (.*)$/m.exec(head);
    return {id: id ? id[1] : null, data: cut < 0 ? text : text.slice(cut + 2)};
  }

  class LiveSocket {
    // store: Obs.Store; lastEvent(): the last event id the page holds; handle(frame): one server frame; push: the
    // page data's live_push (the push tier's channel; none: the hub), from the caller's parse of it.
    constructor(runId, store, lastEvent, handle, status, push) {
      this.runId = runId; this.store = store; this.lastEvent = lastEvent; this.handle = handle;
      this.status = status; // (text) -> shown in the header
      this.ws = null; this.attempts = 0; this.pending = new Set(); this.flushQueued = false;
      this.push = push || null; this.lastId = null; this.recent = []; this.lastSeq = null;
      this.lite = Boolean(this.push && this.push.lite);
    }

    // Push tier: whether the lite channel carries series `name`.
    isLite(name) {
      const l = this.push.lite;
      return l.names.includes(name) || l.prefixes.some((p) => name.startsWith(p));
    }

    // Push tier: a series outside the lite channel is wanted: the full channel from its oldest kept message (its ids
    // are its own: push.since, as a first subscription; the store drops what it holds, and the frames replayed are
    // contiguous, rewinds included).
    widen() {
      this.lite = false; this.lastSeq = null; this.lastId = null;
      const ws = this.ws;
      if (ws) { ws.onclose = null; ws.close(); this.ws = null; this.connect(); }
    }

    open() { return this.ws && this.ws.readyState === WebSocket.OPEN; }

    // History for these series is in: subscribe them (with the next microtask's others).
    ready(names) {
      if (this.push) {
        if (this.lite && names.some((n) => !this.isLite(n))) this.widen();
        this.replay(names);
        return;
      }
      if (!this.open()) return; // onopen resumes everything ready
      names.forEach((n) => this.pending.add(n));
      if (this.flushQueued) return;
      this.flushQueued = true;
      queueMicrotask(() => { this.flushQueued = false; const n = [...this.pending]; this.pending.clear();
        this.resume(n); });
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

    // Push tier: the recent frames' points and rewinds again, for these series only (the store drops what it holds).
    replay(names) {
      const want = new Set(names);
      for (const msg of this.recent) {
        if (msg.type !== "update") continue;
        for (const rw of msg.rewinds || []) {
          want.forEach((n) => { if (this.store.has(n)) this.store.rewindOne(this.store.get(n), rw.to_step); });
        }
        for (const [name, s] of Object.entries(msg.series || {})) if (want.has(name)) this.store.apply(name, s);
      }
    }

    // The one hole check: frames of the live log carry its number, the frames of one entry the same one. A number at
    // or below the last taken is a repeat (a relay that took over, a resume overlapping live frames): dropped. One
    // past the next, or a "gap" frame (what came between is no longer kept), is a hole: refetch the window.
    take(frames) {
      const out = [];
      let entry = null;
      for (const f of frames) {
        if (typeof f.seq !== "number") { out.push(f); continue; } // hello, backfill, pong, error
        if (f.seq === entry) { out.push(f); continue; }
        if (this.lastSeq !== null && f.seq <= this.lastSeq) continue;
        const hole = f.type === "gap" || (this.lastSeq !== null && f.seq > this.lastSeq + 1);
        this.lastSeq = entry = f.seq;
        if (hole) this.refetch();
        if (f.type !== "gap") out.push(f);
      }
      return out;
    }

    // A hole: every series the page holds is read again over HTTP (its answer is newer than what the hole held;
    // ingest commits before it appends), then resumed or replayed as after a first load.
    refetch() {
      for (const s of [...this.store.all()]) this.store.reload(s.name);
    }

    receive(text) {
      const msg = JSON.parse(text);
      const frames = this.take(Array.isArray(msg) ? msg : [msg]); // a coalesced batch: its frames in order
      if (this.push) {
        this.recent.push(...frames);
        if (this.recent.length > RECENT) this.recent.splice(0, this.recent.length - RECENT);
      }
      if (!this.push && frames.some((f) => f.type === "hello")) this.status("live");
      frames.forEach(this.handle);
    }

    url() {
      const proto = location.protocol === "https:" ? "wss://" : "ws://";
      const run = encodeURIComponent(this.runId) + (this.lite ? "/lite/" : "/");
      if (!this.push) { // a reconnect: the log's entries after the last number held come first (or a gap)
        return proto + location.host + "/ws/runs/" + run + (this.lastSeq === null ? "" : "?after_seq=" + this.lastSeq);
      }
      const since = encodeURIComponent(this.lastId || this.push.since);
      return proto + location.host + this.push.path + run + "?last_event_id=" + since;
    }

    connect() {
      const ws = this.ws = this.push ? new WebSocket(this.url(), "ws+meta.nchan") : new WebSocket(this.url());
      ws.onopen = () => {
        this.attempts = 0;
        if (this.push) { this.status("live"); return; } // nchan replays from last_event_id: nothing to ask for
        // (live once the server's "hello" says this socket has joined the run's feed: a frame published between the
        // socket's opening and its joining reaches it only through the backfill this resume asks for)
        const ready = this.store.ready();
        if (ready.length) this.resume(ready);
      };
      ws.onmessage = (ev) => {
        if (!this.push) { this.receive(ev.data); return; }
        const m = nchanMessage(ev.data);
        if (m.id) this.lastId = m.id;
        if (m.data) this.receive(m.data);
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
