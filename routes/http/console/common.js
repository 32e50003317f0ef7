// Shared by the console pages: the key (sessionStorage only), authorized JSON calls, and
// DOM helpers that only ever set textContent (passages are untrusted text, never markup).
"use strict";

const KEY_ITEM = "quarry.key";

function keyInput() {
  const input = document.getElementById("key");
  input.value = sessionStorage.getItem(KEY_ITEM) || "";
  input.addEventListener("change", () => sessionStorage.setItem(KEY_ITEM, input.value.trim()));
  return input;
}

function currentKey() {
  const value = document.getElementById("key").value.trim();
  sessionStorage.setItem(KEY_ITEM, value);
  return value;
}

async function call(method, path, body) {
  const headers = {"Authorization": "Bearer " + currentKey()};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                       credentials: "omit", cache: "no-store"});
  if (!response.ok) {
    let message = "HTTP " + response.status;
    try {
      const err = (await response.json()).error;
      if (err) message = err.code + ": " + err.message;
    } catch (e) { /* not JSON */ }
    throw new Error(message);
  }
  return response;
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(el("td", c));
  return tr;
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}
