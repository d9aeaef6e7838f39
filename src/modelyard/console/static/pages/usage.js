// Usage: requests and tokens by key and deployment over a chosen time range.
import { api, errorBox, formatCount, h, replace, table } from "../console.js";

const range = document.getElementById("range");
const since = document.getElementById("since");
const until = document.getElementById("until");

function localInput(date) {
  const shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return shifted.toISOString().slice(0, 16);
}

function syncInputs() {
  const custom = range.value === "custom";
  since.disabled = !custom;
  until.disabled = !custom;
  if (!custom) {
    const now = new Date();
    until.value = localInput(now);
    since.value = range.value === "all" ? "" : localInput(new Date(now.getTime() - Number(range.value) * 1000));
  }
}

async function refresh() {
  const query = new URLSearchParams();
  if (range.value === "custom") {
    if (since.value) query.set("since", new Date(since.value).toISOString());
    if (until.value) query.set("until", new Date(until.value).toISOString());
  } else if (range.value !== "all") {
    query.set("since", new Date(Date.now() - Number(range.value) * 1000).toISOString());
  }
  try {
    const usage = await api(`/usage?${query}`);
    const stat = (value, label) => h("div", { class: "card" }, h("div", { class: "stat" }, value), h("div", { class: "muted" }, label));
    const prompt = usage.rows.reduce((sum, row) => sum + row.prompt_tokens, 0);
    const completion = usage.rows.reduce((sum, row) => sum + row.completion_tokens, 0);
    const errors = usage.rows.reduce((sum, row) => sum + row.errors, 0);
    replace(document.getElementById("totals"),
      stat(String(usage.requests), "requests"), stat(formatCount(prompt), "prompt tokens"),
      stat(formatCount(completion), "completion tokens"), stat(String(errors), "errors"));
    replace(document.getElementById("rows"), table(
      [
        ["key", (r) => r.key ?? "(no key)"],
        ["deployment", (r) => r.deployment],
        ["requests", (r) => String(r.requests)],
        ["prompt tokens", (r) => String(r.prompt_tokens)],
        ["completion tokens", (r) => String(r.completion_tokens)],
        ["without usage", (r) => String(r.requests_without_usage)],
        ["errors", (r) => String(r.errors)],
      ],
      usage.rows,
      { empty: "No requests through the gateway in this range." },
    ));
    const byDeployment = new Map();
    for (const row of usage.rows) {
      const entry = byDeployment.get(row.deployment) ?? { deployment: row.deployment, requests: 0, total_tokens: 0 };
      entry.requests += row.requests;
      entry.total_tokens += row.total_tokens;
      byDeployment.set(row.deployment, entry);
    }
    replace(document.getElementById("by-deployment"), table(
      [["deployment", (r) => r.deployment], ["requests", (r) => String(r.requests)], ["tokens", (r) => String(r.total_tokens)]],
      [...byDeployment.values()],
      { empty: "–" },
    ));
  } catch (error) {
    replace(document.getElementById("rows"), errorBox(error));
  }
}

range.addEventListener("change", () => {
  syncInputs();
  if (range.value !== "custom") refresh();
});
document.getElementById("range-form").addEventListener("submit", (event) => {
  event.preventDefault();
  refresh();
});

syncInputs();
refresh();
