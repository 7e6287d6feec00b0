// What both pages share: calls to /v1 carrying the API key, and how figures are shown.

const KEY = "kforge.apiKey";
export const FINISHED = new Set(["completed", "failed", "cancelled"]);

let asking = null; // the one pending key form: requests refused together wait on the same answer

// fetch() for /v1: sends the stored key; on 401 asks the user for a key, stores it and tries again.
export async function api(path, options = {}) {
  for (;;) {
    const key = localStorage.getItem(KEY);
    const headers = { ...options.headers, ...(key ? { "X-API-Key": key } : {}) };
    const response = await fetch(path, { ...options, headers });
    if (response.status !== 401) return response;
    // A key entered since this request left is tried as it is, without asking again.
    if (localStorage.getItem(KEY) === key) await askKey(key !== null);
  }
}

function askKey(refused) {
  asking ??= new Promise((resolve) => {
    const form = document.createElement("form");
    form.className = "key-form";
    form.innerHTML = `<label for="api-key"></label>
      <input id="api-key" type="password" autocomplete="off" required>
      <button type="submit">Use key</button>`;
    form.querySelector("label").textContent = refused
      ? "The server refused that API key. Enter another:"
      : "This server needs an API key:";
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      localStorage.setItem(KEY, form.querySelector("input").value.trim());
      form.remove();
      asking = null;
      resolve();
    });
    document.querySelector("main").prepend(form);
    form.querySelector("input").focus();
  });
  return asking;
}

// Why a /v1 call failed, from the server's problem detail where it sent one.
export async function problem(response) {
  const body = await response.json().catch(() => ({}));
  return `${response.status}: ${body.detail ?? response.statusText}`;
}

export function badge(status) {
  const span = document.createElement("span");
  setBadge(span, status);
  return span;
}

export function setBadge(span, status) {
  span.className = `badge ${status}`;
  span.textContent = status;
}

export const ms = (value) => (value == null ? "—" : value.toFixed(value < 10 ? 4 : 2));
export const times = (value) => (value == null ? "—" : `${value.toFixed(2)}×`);

// Local time as 2026-11-01 09:00:05: sortable, and the same whatever the browser's locale.
export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  const two = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}

export function cell(content, className = "") {
  const td = document.createElement("td");
  td.className = className;
  td.append(content ?? "—");
  return td;
}
