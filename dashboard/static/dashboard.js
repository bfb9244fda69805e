// The dashboard's script: fetches the page's live part every interval and
// merges what changed into the page (no reload: no flicker, the scroll
// and a selection stay), draws the charts with uPlot, and sends the actions with the
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

  // The live part comes again every interval: not at all when nothing but
  // the sample time changed (304, by its ETag), else merged into the page
  // in place, so that the cells that did not change are not touched: no
  // flicker, the scroll and a selection stay.
  let lastTag = null;
  async function refreshLive() {
    if (!live) return;
    try {
      const res = await fetch(live.dataset.src, { cache: "no-store", headers: lastTag ? { "If-None-Match": lastTag } : {} });
      if (res.status === 304) {
        const at = live.querySelector("time.at");
        const text = res.headers.get("X-Redsem-Sampled");
        if (at && text && at.textContent !== text) at.textContent = text;
      } else if (res.ok) {
        const t = document.createElement("template");
        t.innerHTML = await res.text();
        morph(live, t.content);
        lastTag = res.headers.get("ETag");
      } else {
        throw new Error(res.status + " " + res.statusText);
      }
      live.classList.remove("stale");
    } catch (e) {
      live.classList.add("stale"); // the server is gone: keep what we have
    }
  }

  // morph makes from's children like to's, changing only what differs.
  function morph(from, to) {
    const want = to.childNodes;
    for (let i = 0; i < want.length; i++) {
      const n = want[i];
      const o = from.childNodes[i];
      if (!o) {
        from.appendChild(n.cloneNode(true));
      } else if (o.nodeType !== n.nodeType || o.nodeName !== n.nodeName) {
        from.replaceChild(n.cloneNode(true), o);
      } else if (o.nodeType !== 1) {
        if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
      } else {
        for (const a of Array.from(o.attributes)) if (!n.hasAttribute(a.name)) o.removeAttribute(a.name);
        for (const a of Array.from(n.attributes)) if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
        morph(o, n);
      }
    }
    while (from.childNodes.length > want.length) from.removeChild(from.lastChild);
  }

  // Each chart: its title, and its series as [label, history field,
  // colour, dash].
  const specs = {
    use: { title: "in use / fleet limit (permits)", series: [["in use", "in_use", "#2563eb"], ["fleet limit", "limit", "#dc2626", [6, 4]]] },
    waiters: { title: "waiters", series: [["waiters", "waiters", "#d97706"]] },
    grants: { title: "grants per second (seen by the sampler)", series: [["grants/s", "grants_per_second", "#059669"]] },
    wait: { title: "oldest wait (seconds)", series: [["oldest wait", "oldest_wait_seconds", "#7c3aed"]] },
    learned: { title: "learned limit (permits) and rate (per second)", series: [["learned limit", "learned_limit", "#0d9488"], ["learned rate/s", "learned_rate_per_second", "#db2777", [6, 4]]] },
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
