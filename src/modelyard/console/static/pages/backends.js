// Backends: the catalog with versions; GPUStack YAML import/export in an editor that marks every
// failing line and lists every problem; custom backends can be removed.
import { api, controlButton, errorBox, h, okBox, replace, show, table } from "../console.js";

const EXAMPLE = `backend_name: my-engine
default_version: "1.0"
health_check_path: /health
version_configs:
  "1.0":
    run_command: my-server --model {{model_path}} --host {{worker_ip}} --port {{port}} --served-model-name {{model_name}}
    custom_framework: cpu
    env:
      MY_SERVER_LOG_LEVEL: info
`;

const textarea = document.getElementById("yaml");
const gutter = document.getElementById("yaml-gutter");
const result = document.getElementById("import-result");
let badLines = new Set();

function drawGutter() {
  const count = Math.max(1, textarea.value.split("\n").length);
  const lines = [];
  for (let number = 1; number <= count; number += 1) {
    lines.push(h("span", { class: badLines.has(number) ? "bad" : null, title: badLines.has(number) ? "problem on this line" : null }, String(number)));
  }
  replace(gutter, lines);
  textarea.rows = Math.max(14, count + 1);
}

textarea.addEventListener("input", () => {
  badLines = new Set();
  drawGutter();
});

function problemsOf(error) {
  const listed = error?.details?.problems;
  if (Array.isArray(listed) && listed.length) return listed;
  // One error whose message already names its place: mark the line, do not say the place twice.
  const match = /line (\d+)/.exec(error.message ?? "");
  return [{ line: match ? Number(match[1]) : null, column: null, message: error.message, hint: error.hint, placeInMessage: true }];
}

function showProblems(problems) {
  badLines = new Set(problems.map((problem) => problem.line).filter(Boolean));
  drawGutter();
  replace(
    result,
    h(
      "div",
      { class: "error", role: "alert" },
      h("p", {}, h("strong", {}, problems.length === 1 ? "1 problem" : `${problems.length} problems`)),
      h(
        "ul",
        { class: "findings", id: "yaml-problems" },
        problems.map((problem) =>
          h("li", { class: "error", dataset: { line: problem.line ?? "" } },
            problem.line && !problem.placeInMessage ? h("strong", {}, `line ${problem.line}${problem.column ? `, column ${problem.column}` : ""}: `) : null,
            problem.message, problem.hint ? h("div", { class: "fix" }, "Fix: ", problem.hint) : null),
        ),
      ),
    ),
  );
}

async function submit(checkOnly) {
  const text = textarea.value;
  try {
    if (checkOnly) {
      const verdict = await api("/backends/check", { method: "POST", text });
      if (!verdict.ok) return showProblems(verdict.problems);
      badLines = new Set();
      drawGutter();
      replace(result, okBox(`No problems: ${verdict.backends.map((b) => `${b.name} (${b.versions.length} version${b.versions.length === 1 ? "" : "s"})`).join(", ")}.`));
      return;
    }
    const imported = await api("/backends/import", { method: "POST", text });
    badLines = new Set();
    drawGutter();
    replace(result, okBox(`Imported ${imported.map((b) => b.name).join(", ")}.`));
    await refresh();
  } catch (error) {
    if (error.code === "invalid_yaml" || error.details?.problems) showProblems(problemsOf(error));
    else replace(result, errorBox(error));
  }
}

document.getElementById("import-form").addEventListener("submit", (event) => {
  event.preventDefault();
  submit(false);
});
document.getElementById("check-yaml").addEventListener("click", () => submit(true));
document.getElementById("example-yaml").addEventListener("click", () => {
  textarea.value = EXAMPLE;
  badLines = new Set();
  drawGutter();
  textarea.focus();
});

function launchOf(version) {
  if (version.image) {
    return [h("div", {}, "image ", h("code", {}, version.image)),
      version.entrypoint?.length ? h("div", {}, "entrypoint ", h("code", {}, version.entrypoint.join(" "))) : null];
  }
  return h("div", {}, "program ", h("code", {}, version.executable ?? "–"));
}

function backendSection(backend) {
  const exportButton = controlButton("GET /api/v1/backends/{name}/export", { class: "secondary" }, "Export YAML");
  exportButton?.addEventListener("click", async () => {
    try {
      textarea.value = await api(`/backends/${encodeURIComponent(backend.name)}/export`);
      badLines = new Set();
      drawGutter();
      replace(result, okBox(`${backend.name} exported into the editor above.`));
      textarea.focus();
    } catch (error) {
      replace(result, errorBox(error));
    }
  });
  const removeButton = backend.builtin ? null : controlButton("DELETE /api/v1/backends/{name}", { class: "danger" }, "Remove");
  removeButton?.addEventListener("click", async () => {
    if (!confirm(`Remove backend ${backend.name}?`)) return;
    try {
      await api(`/backends/${encodeURIComponent(backend.name)}`, { method: "DELETE" });
      await refresh();
    } catch (error) {
      replace(result, errorBox(error));
    }
  });
  return h(
    "details",
    { class: "card backend", dataset: { backend: backend.name } },
    h("summary", {}, h("strong", {}, backend.name), ` · ${backend.family} · ${backend.builtin ? "built in" : "custom"} · versions ${backend.versions.map((v) => v.version).join(", ")} · default ${backend.default_version}`),
    backend.description ? h("p", { class: "muted" }, backend.description) : null,
    backend.deployments?.length ? h("p", {}, "Used by ", backend.deployments.join(", ")) : null,
    table(
      [
        ["version", (v) => v.version],
        ["launch", (v) => launchOf(v)],
        ["command template", (v) => h("code", {}, v.run_command ?? "")],
        ["env", (v) => show(v.env && Object.keys(v.env).length ? Object.entries(v.env).map(([k, value]) => `${k}=${value}`) : null)],
        ["health", (v) => h("code", {}, v.health_path ?? "–")],
        ["GPU", (v) => (v.supports_gpu ? "yes" : "CPU")],
        ["pull", (v) => (v.image ? [v.effective_pull_policy ?? "–", v.pull_policy ? "" : " (default)",
          v.registry_credential ? h("div", { class: "muted" }, "credential ", h("code", {}, v.registry_credential)) : null] : "–")],
      ],
      backend.versions,
    ),
    h("div", { class: "actions" }, exportButton, removeButton),
  );
}

async function refresh() {
  const backends = await api("/backends");
  replace(document.getElementById("backends"), backends.map(backendSection));
}

const credentialResult = document.getElementById("credential-result");

function credentialRemoveButton(credential) {
  const button = controlButton("DELETE /api/v1/registry-credentials/{name}", { class: "danger", "aria-label": `Remove credential ${credential.name}` }, "Remove");
  button?.addEventListener("click", async () => {
    if (!confirm(`Remove registry credential ${credential.name}?`)) return;
    try {
      await api(`/registry-credentials/${encodeURIComponent(credential.name)}`, { method: "DELETE" });
      await refreshCredentials();
    } catch (error) {
      replace(credentialResult, errorBox(error));
    }
  });
  return button;
}

async function refreshCredentials() {
  const credentials = await api("/registry-credentials");
  replace(document.getElementById("credentials"), table(
    [
      ["name", (c) => c.name],
      ["registry", (c) => h("code", {}, c.registry)],
      ["username", (c) => c.username],
      ["password", (c) => c.password],
      ["used by", (c) => show(c.used_by?.length ? c.used_by.join(", ") : null)],
      ["", (c) => credentialRemoveButton(c)],
    ],
    credentials,
    { empty: "No registry credentials yet." },
  ));
}

// Registry credentials are for admins: an operator's page has no such section.
document.getElementById("credential-form")?.addEventListener("submit", async (event) => {
  event.preventDefault();
  const password = document.getElementById("credential-password");
  const body = {
    name: document.getElementById("credential-name").value.trim(),
    registry: document.getElementById("credential-registry").value.trim(),
    username: document.getElementById("credential-username").value,
    password: password.value,
    replace: document.getElementById("credential-replace").checked,
  };
  try {
    const stored = await api("/registry-credentials", { method: "POST", json: body });
    password.value = "";
    replace(credentialResult, okBox(`Stored ${stored.name} for ${stored.registry} (user ${stored.username}).`));
    await refreshCredentials();
  } catch (error) {
    replace(credentialResult, errorBox(error));
  }
});

drawGutter();
refresh();
if (document.getElementById("credentials")) refreshCredentials();
