// API keys: create (the key is shown once, with a copy button), the deployments it may use, its
// limits (requests and tokens per minute, requests at once, a token quota) and what it uses, revoke.
import { api, badge, controlButton, copyText, errorBox, formatTime, h, okBox, replace, table } from "../console.js";

const number = (value) => Number(value).toLocaleString("en-US");

function limitsText(limits) {
  const parts = [];
  if (limits.requests_per_minute != null) parts.push(`${number(limits.requests_per_minute)} requests/min`);
  if (limits.tokens_per_minute != null) parts.push(`${number(limits.tokens_per_minute)} tokens/min`);
  if (limits.max_concurrent_requests != null) parts.push(`${number(limits.max_concurrent_requests)} at once`);
  if (limits.token_quota != null) parts.push(`${number(limits.token_quota)} tokens/${limits.quota_period}`);
  return parts.length ? parts.join(" · ") : "none";
}

function useText(key) {
  const use = key.use;
  if (!use) return "—";
  const parts = [];
  if (use.requests_last_minute != null) {
    parts.push(`${number(use.requests_last_minute)} requests, ${number(use.tokens_last_minute)} tokens in the last minute`);
    parts.push(`${number(use.running)} running`);
  }
  if (use.quota_used_tokens != null) {
    parts.push(`${number(use.quota_used_tokens)} of ${number(key.limits.token_quota)} tokens this ${key.limits.quota_period}`);
  }
  return parts.join(" · ");
}

function limitsAsked() {
  const read = (id) => {
    const text = document.getElementById(id).value.trim();
    return text === "" ? null : Number(text);
  };
  const asked = {
    requests_per_minute: read("key-rpm"),
    tokens_per_minute: read("key-tpm"),
    max_concurrent_requests: read("key-concurrent"),
    token_quota: read("key-quota"),
  };
  if (asked.token_quota != null) asked.quota_period = document.getElementById("key-period").value;
  return Object.fromEntries(Object.entries(asked).filter(([, value]) => value != null));
}

const form = document.getElementById("key-form");
const result = document.getElementById("key-result");

async function refresh() {
  const [keys, deployments] = await Promise.all([api("/keys"), api("/deployments")]);
  const select = document.getElementById("key-deployments");
  const chosen = new Set([...select.selectedOptions].map((option) => option.value));
  replace(select, deployments.map((d) => h("option", { value: d.name, selected: chosen.has(d.name) }, d.name)));
  replace(document.getElementById("keys"), table(
    [
      ["name", (k) => k.name],
      ["prefix", (k) => h("code", {}, k.prefix)],
      ["state", (k) => (k.active ? badge("active") : [badge("revoked"), " ", h("span", { class: "small" }, formatTime(k.revoked_at))])],
      ["deployments", (k) => (k.allowed_deployments ? k.allowed_deployments.join(", ") : "every deployment")],
      ["limits", (k) => limitsText(k.limits)],
      ["use", (k) => useText(k)],
      ["created", (k) => formatTime(k.created_at)],
      ["last used", (k) => formatTime(k.last_used_at)],
      ["action", (k) => {
        if (!k.active) return h("span", { class: "muted" }, "–");
        const button = controlButton("DELETE /api/v1/keys/{name:path}", { class: "danger", "aria-label": `Revoke key ${k.name}` }, "Revoke");
        if (!button) return h("span", { class: "muted" }, "–");
        button.addEventListener("click", async () => {
          if (!confirm(`Revoke key ${k.name}? Clients using it are refused from now on.`)) return;
          try {
            await api(`/keys/${encodeURIComponent(k.name)}`, { method: "DELETE" });
            replace(result, okBox(`Key ${k.name} revoked.`));
            await refresh();
          } catch (error) {
            replace(result, errorBox(error));
          }
        });
        return button;
      }],
    ],
    keys,
    { empty: "No keys yet." },
  ));
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const name = document.getElementById("key-name").value.trim();
  const allowed = [...document.getElementById("key-deployments").selectedOptions].map((option) => option.value);
  try {
    const body = { name, ...limitsAsked() };
    if (allowed.length) body.allowed_deployments = allowed;
    const created = await api("/keys", { method: "POST", json: body });
    const copy = h("button", { type: "button", class: "secondary", id: "copy-key", "data-route": "local" }, "Copy");
    copy.addEventListener("click", () => copyText(created.key, copy));
    replace(result, okBox(
      h("p", {}, `Key ${created.name} created. It is shown this once: copy it now.`),
      h("div", { class: "secret" }, h("code", { id: "new-key" }, created.key), copy),
    ));
    form.reset();
    await refresh();
  } catch (error) {
    replace(result, errorBox(error));
  }
});

refresh();
