// The report page: the last `quarry eval --report` of this server's report folder
// (GET /v1/admin/report, admin scope), its top metrics, the per-route table and its plots.
"use strict";

const COLUMNS = ["questions", "route_accuracy", "gap_f1", "ndcg@10", "recall@k", "mean_attempts", "latency_p50_ms"];

function cell(v) {
  return v === null || v === undefined ? "n/a" : (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(4) : String(v));
}

async function load() {
  showError("");
  try {
    const report = await (await call("GET", "/v1/admin/report")).json();
    document.getElementById("report").hidden = false;
    document.getElementById("title").textContent = report.title;
    document.getElementById("written").textContent = "written " + report.written_at;
    const metrics = document.querySelector("#metrics tbody");
    metrics.replaceChildren(...Object.entries(report.metrics).map(([k, v]) => row([k, cell(v)])));
    const groups = document.querySelector("#per-route tbody");
    groups.replaceChildren(...Object.entries(report.per_route || {}).map(([name, m]) => row([name, ...COLUMNS.map(c => cell(m[c]))])));
    const plots = document.getElementById("plots");
    plots.replaceChildren();
    for (const name of report.plots) {
      const blob = await (await call("GET", "/v1/admin/report/" + encodeURIComponent(name))).blob();
      const figure = el("figure");
      const img = document.createElement("img");
      img.alt = name;
      img.src = URL.createObjectURL(blob);
      figure.appendChild(img);
      figure.appendChild(el("figcaption", name));
      plots.appendChild(figure);
    }
  } catch (e) {
    document.getElementById("report").hidden = true;
    showError(e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  keyInput();
  document.getElementById("load").addEventListener("click", load);
});
