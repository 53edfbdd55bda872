// The metric picker: every series the run has, grouped and named by the registry, filtered by a search field.
// Choosing only moves the selection (arrow keys); the Add button, or Enter, adds the chart.
"use strict";

(function (Obs) {
  const MAX_SHOWN = 400; // options rendered for a broad search; the count says how many more match

  class Picker {
    // registry: Obs.Registry (or anything with info(name) -> {name, title, group}); isShown(name): a chart for it
    // exists; onAdd(name). opts: {prefix: element ids <prefix>-search/-picker/-add/-count, noun: what it counts}.
    constructor(registry, isShown, onAdd, {prefix = "metric", noun = "series"} = {}) {
      this.registry = registry; this.isShown = isShown; this.onAdd = onAdd; this.noun = noun;
      this.names = new Set();
      this.search = document.getElementById(prefix + "-search");
      this.select = document.getElementById(prefix + "-picker");
      this.button = document.getElementById(prefix + "-add");
      this.count = document.getElementById(prefix + "-count");
      this.timer = null;
      this.search.addEventListener("input", () => this.render());
      this.search.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter") { ev.preventDefault(); this.add(); }
        else if (ev.key === "ArrowDown" && this.select.options.length) { ev.preventDefault(); this.select.focus(); }
      });
      this.select.addEventListener("keydown", (ev) => { if (ev.key === "Enter") { ev.preventDefault(); this.add(); } });
      this.select.addEventListener("change", () => this.sync());
      this.button.addEventListener("click", () => this.add());
    }

    // Names the run has: rendered in a batch (a run reveals hundreds at once).
    discover(names) {
      let fresh = false;
      for (const n of names) if (!this.names.has(n)) { this.names.add(n); fresh = true; }
      if (fresh && !this.timer) this.timer = setTimeout(() => { this.timer = null; this.render(); }, 50);
    }

    add() {
      const name = this.select.value;
      if (!name || this.isShown(name)) return;
      this.onAdd(name);
      this.render();
    }

    sync() { this.button.disabled = !this.select.value || this.isShown(this.select.value); }

    render() {
      const words = this.search.value.toLowerCase().split(/\s+/).filter(Boolean);
      const keep = this.select.value;
      const groups = new Map();
      let matched = 0;
      const sorted = [...this.names].sort();
      for (const name of sorted) {
        const info = this.registry.info(name);
        const hay = (info.title + " " + name + " " + info.group).toLowerCase();
        if (!words.every((w) => hay.includes(w))) continue;
        matched++;
        if (matched > MAX_SHOWN) continue;
        if (!groups.has(info.group)) groups.set(info.group, []);
        groups.get(info.group).push(info);
      }
      // (by lower case, not localeCompare: its collator's ICU set-up was ~10-30 ms of a page's start)
      const key = (g) => g[0].toLowerCase(), byGroup = [...groups.entries()]
        .sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
      this.select.replaceChildren(...byGroup.map(([group, infos]) =>
        Obs.el("optgroup", {label: `${group} (${infos.length})`}, ...infos.map((info) => {
          const shown = this.isShown(info.name);
          return Obs.el("option", {value: info.name, disabled: shown, text: (info.title === info.name ? info.name
            : `${info.title} — ${info.name}`) + (shown ? " (shown)" : "")});
        }))));
      const open = [...this.select.options].filter((o) => !o.disabled); // (the kept choice, else the first open one)
      this.select.value = open.some((o) => o.value === keep) ? keep : open.length ? open[0].value : "";
      this.count.textContent = words.length ? `${matched} of ${this.names.size} ${this.noun} match`
        : `${this.names.size} ${this.noun}`;
      this.sync();
    }
  }

  Obs.Picker = Picker;
})(window.Obs);
