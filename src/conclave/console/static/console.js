// Conclave console: the overview's rate charts, and polling that backs off when a service
// or the console is unreachable. No framework; htmx does the fragment swaps.
"use strict";

const samples = new Map();   // service -> [{at, requests, server_errors, rate_limited}]
const KEEP = 60;             // samples per service (5 minutes at the 5 s poll)

function readSamples(root) {
  const section = root.querySelector("#services");
  if (!section) return;
  const at = Number(section.dataset.sampledAt);
  for (const row of section.querySelectorAll("tr[data-service]")) {
    if (row.dataset.requests === undefined) continue;
    const list = samples.get(row.dataset.service) || [];
    list.push({
      at,
      requests: Number(row.dataset.requests),
      server_errors: Number(row.dataset.server_errors),
      rate_limited: Number(row.dataset.rate_limited),
    });
    while (list.length > KEEP) list.shift();
    samples.set(row.dataset.service, list);
  }
  draw();
}

function rates(list, key) {
  const out = [];
  for (let i = 1; i < list.length; i++) {
    const seconds = list[i].at - list[i - 1].at;
    const delta = list[i][key] - list[i - 1][key];
    // A restarted service's counters start again from zero: no negative rate.
    out.push(seconds > 0 && delta >= 0 ? delta / seconds : 0);
  }
  return out;
}

function draw() {
  for (const figure of document.querySelectorAll("[data-chart-for]")) {
    const list = samples.get(figure.dataset.chartFor) || [];
    for (const cell of figure.querySelectorAll("[data-rate]")) {
      const series = rates(list, cell.dataset.rate);
      cell.textContent = series.length ? series[series.length - 1].toFixed(2) : "–";
    }
    const line = figure.querySelector("[data-spark]");
    const series = rates(list, line.dataset.spark);
    const top = Math.max(1e-9, ...series);
    const step = series.length > 1 ? 120 / (series.length - 1) : 0;
    line.setAttribute("points", series.map((value, i) =>
      `${(i * step).toFixed(1)},${(29 - (value / top) * 28).toFixed(1)}`).join(" "));
  }
}

// A failed poll (network error, 5xx) would end htmx's self-renewing poll: retry it, waiting
// twice as long each time (5 s up to 2 minutes), until a poll succeeds again. Any element marked
// `data-poll` (the overview's services, an expedition's live status, the graph's heartbeat) polls
// this way; each keeps its own backoff, by id.
const backoffs = new Map();
function retryLater(event) {
  const section = event.detail && event.detail.elt;
  if (!section || !section.hasAttribute("data-poll") || !section.id) return;
  const wait = backoffs.get(section.id) || 5000;
  setTimeout(() => {
    const current = document.getElementById(section.id);
    if (current && current.hasAttribute("data-poll")) htmx.trigger(current, "retry");
  }, wait);
  backoffs.set(section.id, Math.min(wait * 2, 120000));
}

document.addEventListener("DOMContentLoaded", () => readSamples(document));
// Actions that only make sense while a polled part is live (an expedition's Cancel button) sit
// outside it, so polling never replaces a focused button; they go once the part stops polling.
function hideFinishedActions() {
  for (const action of document.querySelectorAll("[data-while-live]")) {
    const part = document.getElementById(action.dataset.whileLive);
    if (part && !part.hasAttribute("data-poll")) action.hidden = true;
  }
}

document.addEventListener("htmx:afterSwap", (event) => {
  const target = event.detail && event.detail.target;
  if (target && target.id) backoffs.delete(target.id);
  readSamples(document);
});
document.addEventListener("htmx:afterSettle", hideFinishedActions);
document.addEventListener("htmx:sendError", retryLater);
document.addEventListener("htmx:responseError", retryLater);

// A thumbnail the edge has none of (a format it cannot render) is hidden, not shown broken.
// `error` does not bubble: listened for in the capture phase.
document.addEventListener("error", (event) => {
  const image = event.target;
  if (image instanceof HTMLImageElement && image.classList.contains("thumb")) {
    image.hidden = true;
  }
}, true);
