// Light or dark: the system's preference unless the visitor chose one with the header's toggle (localStorage). Loaded
// in <head> so the page never flashes the wrong theme; charts redraw on the "obs-theme" event.
"use strict";

(function () {
  const KEY = "obs.theme";
  const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  let chosen = null;
  try { chosen = localStorage.getItem(KEY); } catch (e) { chosen = null; }
  const current = () => chosen || (media && media.matches ? "dark" : "light");

  function apply() {
    const theme = current(), btn = document.getElementById("theme-toggle");
    document.documentElement.dataset.theme = theme;
    if (btn) { btn.hidden = false; btn.setAttribute("aria-pressed", String(theme === "dark")); }
    document.dispatchEvent(new CustomEvent("obs-theme", {detail: theme}));
  }

  apply();
  if (media && media.addEventListener) media.addEventListener("change", () => { if (!chosen) apply(); });
  document.addEventListener("DOMContentLoaded", () => {
    const btn = document.getElementById("theme-toggle");
    if (!btn) return;
    btn.addEventListener("click", () => {
      chosen = current() === "dark" ? "light" : "dark";
      try { localStorage.setItem(KEY, chosen); } catch (e) { /* private mode: this page only */ }
      apply();
    });
    apply();
  });
})();
