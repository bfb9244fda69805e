// The dashboard's script: fetches the page's live part every interval and
// swaps it in only when it changed (no reload: no flicker, the scroll
// stays), draws the charts with uPlot, and sends the actions with the
// token typed in the header. Nothing is loaded from elsewhere.
(function () {
  "use strict";
  const interval = Number(document.body.dataset.interval) || 1000;
  const live = document.getElementById("live");
  const chartsEl = document.getElementById("charts");
  const status = document.getElementById("status");
  const token = document.getElementById("token");

  // The token stays in this tab only, never in a cookie.
  if (token) {
    token.value = sessionStorage.getItem("redsem-token") || "";
    token.addEventListener("input", () => sessionStorage.setItem("redsem-token", token.value));
  }

  let lastLive = null;
  async function refreshLive() {
    if (!live) return;
    try {
      const res = await fetch(live.dataset.src, { cache: "no-store" });
      if (!res.ok) throw new Error(res.status + " " + res.statusText);
      const html = await res.text();
      if (html !== lastLive) {
        live.innerHTML = html;
        lastLive = html;
      }
      live.classList.remove("stale");
    } catch (e) {
      live.classList.add("stale"); // the server is gone: keep what we have
    }
  }

  // Each chart: its title, and its series as [label, history field,
  // colour, dash].
  const specs = {
    use: { title: "in use / fleet limit (permits)", series: [["in use", "in_use", "#2563eb"], ["fleet limit", "limit", "#dc2626", [6, 4]]] },
    waiters: { title: "waiters", series: [["waiters", "waiters", "#d97706"]] },
    grants: { title: "grants per second (seen by the sampler)", series: [["grants/s", "grants_per_second", "#059669"]] },
    wait: { title: "oldest wait (seconds)", series: [["oldest wait", "oldest_wait_seconds", "#7c3aed"]] },
  };
  const charts = [];
  window.redsemCharts = charts; // for the browser tests

  const steps = uPlotSteps();
  function uPlotSteps() {
    return typeof uPlot !== "undefined" && uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;
  }

  function options(spec, el) {
    return {
      title: spec.title,
      width: el.clientWidth || 600,
      height: 170,
      // Counts hold until the next sample: drawn as steps.
      series: [{}].concat(spec.series.map((s) => ({ label: s[0], stroke: s[2], width: 2, dash: s[3], points: { show: false }, paths: steps }))),
      scales: { y: { range: (u, min, max) => [0, Math.max(1, (max || 0) * 1.1)] } },
    };
  }

  async function refreshCharts() {
    if (!chartsEl || typeof uPlot === "undefined") return;
    try {
      const res = await fetch(chartsEl.dataset.src, { cache: "no-store" });
      if (!res.ok) return;
      const h = await res.json();
      chartsEl.querySelectorAll("[data-chart]").forEach((el, i) => {
        const spec = specs[el.dataset.chart];
        const data = [h.time].concat(spec.series.map((s) => h[s[1]] || []));
        if (charts[i]) charts[i].setData(data);
        else charts[i] = new uPlot(options(spec, el), data, el);
      });
    } catch (e) {
      // the next tick tries again
    }
  }

  window.addEventListener("resize", () => {
    chartsEl && chartsEl.querySelectorAll("[data-chart]").forEach((el, i) => {
      if (charts[i]) charts[i].setSize({ width: el.clientWidth, height: 170 });
    });
  });

  async function send(action, body) {
    status.textContent = "…";
    status.className = "";
    let msg;
    let ok = false;
    try {
      const res = await fetch("actions/" + action, {
        method: "POST",
        headers: { "X-Redsem-Token": token ? token.value : "" },
        body: new URLSearchParams(body),
      });
      ok = res.ok;
      const j = await res.json();
      msg = j.message || j.error;
    } catch (e) {
      msg = String(e);
    }
    status.textContent = msg;
    status.className = ok ? "ok" : "error";
    tick();
  }

  document.addEventListener("submit", (e) => {
    const f = e.target;
    if (!f.classList.contains("action")) return;
    e.preventDefault();
    send(f.getAttribute("action").replace(/^actions\//, ""), new FormData(f));
  });

  document.addEventListener("click", (e) => {
    const b = e.target.closest("button.release");
    if (!b) return;
    if (!confirm("Release lease " + b.dataset.id + " of " + b.dataset.name + "? Its holder learns of the loss at its next refresh.")) return;
    send("release", { name: b.dataset.name, id: b.dataset.id });
  });

  let busy = false;
  async function tick() {
    if (busy) return;
    busy = true;
    try {
      await Promise.all([refreshLive(), refreshCharts()]);
    } finally {
      busy = false;
    }
  }
  tick();
  setInterval(tick, interval);
})();
