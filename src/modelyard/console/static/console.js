// What every console page shares: the REST API client (session cookie + CSRF token), a tiny DOM
// builder (text only, never HTML strings), formatting, and polling that pauses in hidden tabs.

export const csrfToken = document.querySelector('meta[name="csrf-token"]')?.content ?? "";

// Every route of the server's role table and whether this user's role may call it (the server
// writes it into the page from modelyard/server/policy.py: the one table the routes enforce).
const ROUTES = JSON.parse(document.getElementById("routes")?.textContent ?? "{}");

/** Whether the user's role may call `route` ("DELETE /api/v1/keys/{name:path}", as in the
 * table); a route not in the table is a mistake in the page, and throws. */
export function mayCall(route) {
  if (!(route in ROUTES)) throw new Error(`console control names route ${route}, which is not in the server's role table`);
  return ROUTES[route];
}

/** A button that calls `route` (marked data-route), or null where the user's role may not call
 * it: a page never offers what the server would refuse. */
export function controlButton(route, attributes, ...children) {
  if (!mayCall(route)) return null;
  return h("button", { type: "button", ...attributes, "data-route": route }, ...children);
}

export class ApiError extends Error {
  constructor(status, body) {
    const error = body?.error ?? {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code ?? "http_error";
    this.hint = error.hint ?? null;
    this.details = error.details ?? null;
  }
}

/** Call the REST API (the same one the CLI uses). Writes carry the CSRF token. */
export async function api(path, { method = "GET", json, text, raw = false, signal } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD") headers["X-CSRF-Token"] = csrfToken;
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (text !== undefined) {
    headers["Content-Type"] = "text/plain; charset=utf-8";
    body = text;
  }
  const response = await fetch(`/api/v1${path}`, { method, headers, body, signal, credentials: "same-origin" });
  if (response.status === 401) {
    window.location.assign(`/login?next=${encodeURIComponent(location.pathname + location.search)}`);
    throw new ApiError(401, await response.json().catch(() => null));
  }
  if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
  if (raw) return response;
  if (response.status === 204) return null;
  const type = response.headers.get("content-type") || "";
  return type.includes("json") ? response.json() : response.text();
}

/** encodeURIComponent for one path segment, but names may contain "/" (org/model): keep it. */
export function pathName(name) {
  return name.split("/").map(encodeURIComponent).join("/");
}

/** h("p", {class: "x"}, "text", child): elements from text and nodes only. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(element.dataset, value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function replace(container, ...children) {
  container.replaceChildren(...children.flat(Infinity).filter((child) => child !== null && child !== undefined));
}

export function badge(state) {
  return h("span", { class: `badge ${String(state).replace(/[^a-z_-]/gi, "")}` }, state);
}

/** A table from rows; columns are [header, row => cell] pairs. */
export function table(columns, rows, { empty = "Nothing yet.", caption } = {}) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      caption ? h("caption", { class: "visually-hidden" }, caption) : null,
      h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", { scope: "col" }, title)))),
      h("tbody", {}, rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row)))))),
    ),
  );
}

/** A definition list of every field of an object, in order; values shown generically. */
export function facts(object, { labels = {}, skip = [] } = {}) {
  const entries = Object.entries(object).filter(([key]) => !skip.includes(key));
  return h(
    "dl",
    { class: "facts" },
    entries.map(([key, value]) => [h("dt", {}, labels[key] ?? key.replaceAll("_", " ")), h("dd", {}, show(value))]),
  );
}

/** Any JSON value as readable text (lists joined, objects as compact JSON, empty as a dash). */
export function show(value) {
  if (value === null || value === undefined || value === "") return "–";
  if (Array.isArray(value)) {
    if (!value.length) return "–";
    return value.every((item) => typeof item !== "object") ? value.join(", ") : h("code", {}, JSON.stringify(value));
  }
  if (typeof value === "object") return h("code", {}, JSON.stringify(value));
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

export function errorBox(error) {
  const findings = error?.details?.findings ?? [];
  return h(
    "div",
    { class: "error", role: "alert" },
    h("p", {}, h("strong", {}, error.message ?? String(error))),
    error.hint ? h("p", { class: "hint" }, "Fix: ", error.hint) : null,
    findings.length ? findingList(findings.filter((finding) => finding.severity === "error")) : null,
  );
}

export function findingList(findings) {
  return h(
    "ul",
    { class: "findings" },
    findings.map((finding) =>
      h(
        "li",
        { class: finding.severity, dataset: { check: finding.check_id ?? "" } },
        h("strong", {}, `${finding.severity}: `),
        finding.message,
        finding.fix ? h("div", { class: "fix" }, "Fix: ", finding.fix) : null,
      ),
    ),
  );
}

export function okBox(...children) {
  return h("div", { class: "ok", role: "status" }, ...children);
}

export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}

export function formatCount(count) {
  if (count === null || count === undefined) return "–";
  if (count >= 1e9) return `${(count / 1e9).toFixed(2)} B`;
  if (count >= 1e6) return `${(count / 1e6).toFixed(1)} M`;
  if (count >= 1e3) return `${(count / 1e3).toFixed(1)} k`;
  return String(count);
}

export function formatSeconds(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function formatTime(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

/** Run `task` now and every `intervalMs` while the tab is visible; returns a stop function. */
export function poll(task, intervalMs) {
  let timer = null;
  let stopped = false;
  const run = async () => {
    timer = null;
    if (stopped) return;
    if (document.visibilityState === "visible") {
      try {
        await task();
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) console.warn("poll:", error.message);
      }
    }
    if (!stopped) timer = setTimeout(run, intervalMs);
  };
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && timer !== null) {
      clearTimeout(timer);
      run();
    }
  });
  run();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
  };
}

/** Call `task` once the user paused typing for `delayMs`. */
export function debounce(task, delayMs) {
  let timer = null;
  return (...args) => {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(() => {
      timer = null;
      task(...args);
    }, delayMs);
  };
}

export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    if (button) button.textContent = "Copied";
  } catch {
    if (button) button.textContent = "Select and copy by hand";
  }
}

export function main() {
  return document.getElementById("main");
}

/** Keep a same-origin frame (a benchmark report) as large as its content, so that none of it is
 * cut or scrolls inside the frame: as tall as its content, and at least as wide (a wider report
 * makes the frame's .report-wrap scroll sideways instead). Measured when it loads and whenever
 * its content resizes (plotly draws its charts after the load). Returns a function that stops. */
export function fitFrame(frame) {
  let observer = null;
  const fit = () => {
    const root = frame.contentDocument?.documentElement;
    if (!root) return;
    // Borders are outside the content box: the frame's box is its content plus them.
    const height = root.scrollHeight;
    if (Math.abs(frame.clientHeight - height) > 1) frame.style.height = `${height + frame.offsetHeight - frame.clientHeight}px`;
    const width = root.scrollWidth;
    if (width > frame.clientWidth + 1) frame.style.minWidth = `${width + frame.offsetWidth - frame.clientWidth}px`;
  };
  const onLoad = () => {
    observer?.disconnect();
    fit();
    const body = frame.contentDocument?.body;
    if (!body) return;
    observer = new ResizeObserver(fit);
    observer.observe(body);
  };
  frame.addEventListener("load", onLoad);
  return () => {
    frame.removeEventListener("load", onLoad);
    observer?.disconnect();
  };
}
