// The Ask page: POST /v1/query with the key, then the answer context or the gap, the route
// scores and every attempt with its grade and timing; GET /v1/documents/{id} to open one.
"use strict";

function fmt(x) {
  return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(4)) : (x === null || x === undefined ? "" : String(x));
}

// Where a passage of a file was: its PDF page, or its heading path (DOCX, HTML).
function placeOf(item) {
  const parts = [];
  if (item.page) parts.push("page " + item.page);
  if (item.section && item.section.length) parts.push(item.section.join(" › "));
  return parts.join(" · ");
}

function renderContext(items) {
  const list = document.getElementById("context");
  list.replaceChildren();
  for (const item of items) {
    const li = el("li", null, "passage");
    li.dataset.docId = item.doc_id;
    const head = el("div", null, "passage-head");
    head.appendChild(el("strong", item.title || item.doc_id));
    head.appendChild(el("span", " " + item.doc_id + " · score " + fmt(item.score) + " · " + item.retrievers.join("+")
                              + (item.date ? " · " + item.date : "") + " · chars " + item.offsets.start + "–" + item.offsets.end, "meta"));
    const place = placeOf(item);
    if (place) head.appendChild(el("span", " · " + place, "place"));
    const open = el("button", "open", "open-doc");
    open.type = "button";
    open.addEventListener("click", () => openDocument(item.doc_id));
    head.appendChild(open);
    li.appendChild(head);
    li.appendChild(renderMarkdown(el("div", null, "passage-text"), item.text));  // markup.js: built as text nodes
    list.appendChild(li);
  }
}

function renderRows(rows) {
  const box = document.getElementById("rows");
  box.hidden = !rows;
  if (!rows) return;
  document.getElementById("sql").textContent = rows.sql;
  const table = document.getElementById("row-table");
  table.replaceChildren();
  const head = document.createElement("tr");
  for (const c of rows.columns) head.appendChild(el("th", c));
  table.appendChild(head);
  for (const r of rows.data.slice(0, 100)) table.appendChild(row(r.map(fmt)));
}

function render(answer) {
  document.getElementById("result").hidden = false;
  document.getElementById("status").textContent = answer.status;
  document.getElementById("timing").textContent = answer.elapsed_ms.toFixed(1) + " ms · stop: " + answer.stop_reason;
  const gap = document.getElementById("gap");
  gap.hidden = answer.status !== "evidence_gap";
  if (answer.gap) {
    document.getElementById("gap-reason").textContent = answer.gap.reason;
    document.getElementById("gap-missing").textContent = answer.gap.missing.join(", ") || "–";
    document.getElementById("gap-detail").textContent = answer.gap.detail;
  }
  // a gap carries the best partial passages: shown, under a note that they do not answer
  document.getElementById("partial-note").hidden = !(answer.status === "evidence_gap" && answer.context.length);
  renderContext(answer.context);
  renderRows(answer.status === "answer_context" ? answer.rows : null);
  document.getElementById("route-chosen").textContent = answer.route.chosen;
  document.getElementById("route-reason").textContent = answer.route.reason;
  const scores = document.querySelector("#route-scores tbody");
  scores.replaceChildren(...Object.entries(answer.route.scores).sort((a, b) => b[1] - a[1]).map(([r, s]) => row([r, fmt(s)])));
  const attempts = document.querySelector("#attempts tbody");
  attempts.replaceChildren(...answer.attempts.map(a => row([
    a.n, a.route, a.strategy, a.query, a.hits, a.grade ? String(a.grade.sufficient) : "",
    a.grade ? fmt(a.grade.p_sufficient) : "", a.grade && a.grade.missing ? a.grade.missing.join(", ") : "", fmt(a.ms)])));
}

async function ask(event) {
  event.preventDefault();
  showError("");
  const button = document.getElementById("submit");
  const busy = document.getElementById("busy");
  button.disabled = true;
  busy.hidden = false;  // the request is in flight: the loop may take a few seconds
  document.getElementById("result").setAttribute("aria-busy", "true");
  const body = {question: document.getElementById("question").value};
  const k = parseInt(document.getElementById("k").value, 10);
  if (k) body.k = k;
  const today = document.getElementById("today").value;
  if (today) body.today = today;
  try {
    render(await (await call("POST", "/v1/query", body)).json());
  } catch (e) {
    document.getElementById("result").hidden = true;
    showError(e.message);
  } finally {
    button.disabled = false;
    busy.hidden = true;
    document.getElementById("result").removeAttribute("aria-busy");
  }
}

// A document's URL: its id is one path segment, every reserved character encoded, so no id
// can add a segment or climb out of /v1/documents/ (ids "." and ".." would be dot segments
// whatever their encoding, and the service refuses them).
function documentPath(docId) {
  if (docId === "." || docId === "..") throw new Error("this document id cannot be opened");
  return "/v1/documents/" + encodeURIComponent(docId);
}

async function openDocument(docId) {
  showError("");
  try {
    const doc = await (await call("GET", documentPath(docId))).json();
    document.getElementById("document").hidden = false;
    document.getElementById("doc-id").textContent = doc.doc_id;
    document.getElementById("doc-meta").textContent = [doc.title, doc.source, doc.date].filter(Boolean).join(" · ");
    renderMarkdown(document.getElementById("doc-text"), doc.text);
  } catch (e) {
    showError(e.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  keyInput();
  document.getElementById("ask").addEventListener("submit", ask);
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_ITEM);
    document.getElementById("key").value = "";
  });
  document.getElementById("close-doc").addEventListener("click", () => { document.getElementById("document").hidden = true; });
});
