// Passages as people read them. Documents are often Markdown (tables with pipes, **bold**),
// which read badly raw. A small subset is drawn here: headings, paragraphs, bullet and
// numbered lists, tables, fenced code, bold, italics and inline code. Every node is made with
// createElement and filled with textContent, so nothing a document holds can become markup:
// no HTML, no links, no images, no attributes taken from the text.
"use strict";

const FENCE = /^\s*(```|~~~)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const ITEM = /^\s*([-*+]|\d{1,3}[.)])\s+(.*)$/;
const TABLE_ROW = /^\s*\|.*\|\s*$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;
const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(__[^_\n]+__)|(\*[^*\s][^*\n]*\*)|(\b_[^_\s][^_\n]*_\b)/g;

function renderMarkdown(container, text) {
  container.replaceChildren();
  const lines = String(text === null || text === undefined ? "" : text).split(/\r?\n/);
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }
    if (FENCE.test(line)) {
      const code = [];
      for (i++; i < lines.length && !FENCE.test(lines[i]); i++) code.push(lines[i]);
      i++;
      container.appendChild(el("pre", code.join("\n"), "md-code"));
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      container.appendChild(mdInline(document.createElement("h" + Math.min(6, heading[1].length + 3)), heading[2]));
      i++;
      continue;
    }
    if (TABLE_ROW.test(line)) {
      const rows = [];
      for (; i < lines.length && (TABLE_ROW.test(lines[i]) || TABLE_RULE.test(lines[i])); i++) rows.push(lines[i]);
      container.appendChild(mdTable(rows));
      continue;
    }
    if (ITEM.test(line)) {
      const list = document.createElement(/^\s*\d/.test(line) ? "ol" : "ul");
      for (let m; i < lines.length && (m = ITEM.exec(lines[i])); i++) list.appendChild(mdInline(document.createElement("li"), m[2]));
      container.appendChild(list);
      continue;
    }
    const para = [];
    for (; i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i])
           && !TABLE_ROW.test(lines[i]) && !ITEM.test(lines[i]); i++) para.push(lines[i].trim());
    container.appendChild(mdInline(document.createElement("p"), para.join(" ")));
  }
  return container;
}

function mdTable(lines) {
  const node = el("table", null, "md-table");
  let header = lines.length > 1 && TABLE_RULE.test(lines[1]);
  for (const line of lines) {
    if (TABLE_RULE.test(line)) continue;
    const tr = document.createElement("tr");
    for (const cell of line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|")) {
      tr.appendChild(mdInline(document.createElement(header ? "th" : "td"), cell.trim()));
    }
    header = false;
    node.appendChild(tr);
  }
  return node;
}

function mdInline(node, text) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) node.appendChild(document.createTextNode(text.slice(last, m.index)));
    const token = m[0];
    if (m[1]) node.appendChild(el("code", token.slice(1, -1)));
    else if (m[2] || m[3]) node.appendChild(el("strong", token.slice(2, -2)));
    else node.appendChild(el("em", token.slice(1, -1)));
    last = m.index + token.length;
  }
  if (last < text.length) node.appendChild(document.createTextNode(text.slice(last)));
  return node;
}
