// API keys: create (the key is shown once, with a copy button), the deployments it may use, revoke.
import { api, badge, copyText, errorBox, formatTime, h, okBox, replace, table } from "../console.js";

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
      ["state", (k) => badge(k.active ? "active" : "revoked")],
      ["deployments", (k) => (k.allowed_deployments ? k.allowed_deployments.join(", ") : "every deployment")],
      ["created", (k) => formatTime(k.created_at)],
      ["last used", (k) => formatTime(k.last_used_at)],
      ["", (k) => {
        if (!k.active) return formatTime(k.revoked_at);
        const button = h("button", { type: "button", class: "danger", "aria-label": `Revoke key ${k.name}` }, "Revoke");
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
    const created = await api("/keys", { method: "POST", json: allowed.length ? { name, allowed_deployments: allowed } : { name } });
    const copy = h("button", { type: "button", class: "secondary", id: "copy-key" }, "Copy");
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
