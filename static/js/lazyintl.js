// uPlot (the bundle's next part) makes an Intl.NumberFormat and reads Intl.DateTimeFormat's zone as it loads: ICU's
// set-up, ~10-40 ms of a fresh page, before any chart drew, though none uses either (plot.js labels every axis and
// gives uPlot.tzDate "Etc/UTC", converted before uPlot compares zones). Its call of each gets a stand-in (the number
// format made once used; no zone: uPlot then takes none for the browser's own, right if slower), and the real
// constructors are back at once, at the end of the bundle at the latest (tests/web/dashboard/test_first_paint_work).
"use strict";
(function (I, NF, DTF) {
  const lazy = (get, real = null) => ({format: (v) => (real = real || get()).format(v),
                                       resolvedOptions: () => (real = real || get()).resolvedOptions()});
  I.NumberFormat = function (...a) { I.NumberFormat = NF; return lazy(() => new NF(...a)); };
  I.DateTimeFormat = function (...a) {
    I.DateTimeFormat = DTF; return a.length ? new DTF(...a) : {...lazy(() => new DTF()), resolvedOptions: () => ({})};
  };
  queueMicrotask(() => Object.assign(I, {NumberFormat: NF, DateTimeFormat: DTF}));
})(Intl, Intl.NumberFormat, Intl.DateTimeFormat);
