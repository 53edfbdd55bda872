// The dashboard bundle's first part (templates/runs/_dashboard_scripts.html), just before uPlot, which makes an
// Intl.NumberFormat and reads Intl.DateTimeFormat's time zone as it loads: the page's first use of ICU, whose set-up
// (~10-40 ms of one core in a fresh page) came before any chart was drawn, though no chart needs either (plot.js
// gives every axis its own labels, and uPlot.tzDate "Etc/UTC", which uPlot converts before it compares a zone with
// the one it read). So the next call of each constructor (uPlot's) gets a stand-in, and the constructor is put back
// at once, or at the end of the bundle's script at the latest: every later caller gets the real thing. The number
// format's stand-in makes the real one when it is first used; the date format's answers resolvedOptions() with no
// time zone (uPlot then takes every zone for one not the browser's own: right, if slower, for any zone).
"use strict";

(function () {
  const NumberFormat = Intl.NumberFormat, DateTimeFormat = Intl.DateTimeFormat;
  const restore = () => { Intl.NumberFormat = NumberFormat; Intl.DateTimeFormat = DateTimeFormat; };
  const lazy = (Real, args) => {
    let real = null;
    const get = () => real || (real = new Real(...args));
    return {format: (v) => get().format(v), formatToParts: (v) => get().formatToParts(v),
            resolvedOptions: () => get().resolvedOptions()};
  };
  Intl.NumberFormat = function (...args) {
    Intl.NumberFormat = NumberFormat; // (one call only)
    return lazy(NumberFormat, args);
  };
  Intl.DateTimeFormat = function (...args) {
    Intl.DateTimeFormat = DateTimeFormat;
    return args.length ? new DateTimeFormat(...args) : {...lazy(DateTimeFormat, args), resolvedOptions: () => ({})};
  };
  queueMicrotask(restore); // (after the script that runs this one: the bundle)
})();
