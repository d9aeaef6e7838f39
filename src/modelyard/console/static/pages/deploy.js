// New deployment: the form, with doctor's preflight (the same checks as deploying, nothing stored)
// shown as you type; a refused deploy shows the error and its fix. A preset fills the form.
import { api, debounce, errorBox, findingList, formatBytes, h, okBox, pathName, replace } from "../console.js";
import { Presets } from "./deploy_presets.js";

const form = document.getElementById("deploy-form");
const preflight = document.getElementById("preflight");
const result = document.getElementById("deploy-result");
const backendSelect = document.getElementById("backend");
const versionSelect = document.getElementById("backend_version");
let backends = [];
let sequence = 0;

function value(id) {
  return document.getElementById(id).value;
}

export function requestBody() {
  const body = {
    model: value("model"),
    backend: value("backend"),
    replicas: Number(value("replicas") || 1),
    backend_parameters: value("backend_parameters"),
    env: value("env"),
    skip_verification: document.getElementById("skip_verification").checked,
  };
  if (value("name").trim()) body.name = value("name").trim();
  if (value("backend_version")) body.backend_version = value("backend_version");
  if (value("gpus") !== "") body.gpus_per_replica = Number(value("gpus"));
  const ids = chosenGpuIds();
  if (ids.length) body.gpu_ids = ids;
  return body;
}

function chosenGpuIds() {
  return [...document.querySelectorAll('#gpu-choices input[name="gpu_id"]:checked')].map((box) => Number(box.value));
}

/** One checkbox per GPU of the inventory (the dashboard's), by index and name. */
function fillGpuChoices(inventory) {
  const choices = document.getElementById("gpu-choices");
  if (!inventory.gpus.length) {
    replace(choices, h("p", { class: "muted" }, `No GPUs to choose (${inventory.unavailable_reason ?? "none found"}): set GPUs per replica to 0 for a CPU engine.`));
    return;
  }
  replace(
    choices,
    inventory.gpus.map((gpu) =>
      h("label", { class: "check" }, h("input", { type: "checkbox", name: "gpu_id", value: gpu.index }), `GPU ${gpu.index} · ${gpu.name} · ${formatBytes(gpu.memory_total_bytes)}`),
    ),
  );
}

function fillVersions() {
  const backend = backends.find((b) => b.name === backendSelect.value);
  replace(versionSelect, (backend?.versions ?? []).map((v) => h("option", { value: v.version, selected: v.version === backend.default_version }, v.version + (v.version === backend.default_version ? " (default)" : ""))));
}

function showVerdict(verdict) {
  const findings = verdict.findings ?? [];
  const parts = [];
  if (verdict.ok) {
    const planned = verdict.planned;
    parts.push(okBox(h("p", {}, h("strong", {}, "Ready to deploy"), ` as ${planned.name} on ${planned.backend} ${planned.backend_version}, ${planned.gpus_per_replica ? `${planned.gpus_per_replica} GPU(s) per replica` : "CPU"}.`)));
  } else {
    parts.push(errorBox(verdict.error ?? { message: "refused" }));
  }
  const memory = findings.filter((f) => String(f.check_id ?? "").startsWith("memory."));
  const other = findings.filter((f) => !memory.includes(f));
  if (other.length) parts.push(h("h3", {}, "Findings"), findingList(other));
  parts.push(h("h3", {}, "Memory estimate"));
  parts.push(memory.length ? findingList(memory) : h("p", { class: "muted", id: "memory-none" }, "No GPU memory estimate: it is made for vLLM and SGLang on GPUs (the host's GPUs are listed on the dashboard)."));
  replace(preflight, parts);
}

async function runPreflight() {
  if (!value("model")) return;
  const mine = ++sequence;
  preflight.setAttribute("aria-busy", "true");
  try {
    const verdict = await api("/deployments/preflight", { method: "POST", json: requestBody() });
    if (mine === sequence) showVerdict(verdict);
  } catch (error) {
    if (mine === sequence) replace(preflight, errorBox(error));
  } finally {
    if (mine === sequence) preflight.removeAttribute("aria-busy");
  }
}

const later = debounce(runPreflight, 350);
form.addEventListener("input", later);
backendSelect.addEventListener("change", () => {
  fillVersions();
  later();
});

const presets = new Presets({
  select: document.getElementById("preset"),
  info: document.getElementById("preset-info"),
  model: () => value("model"),
  fill: (preset) => {
    backendSelect.value = preset.backend;
    fillVersions();
    versionSelect.value = preset.version;
    document.getElementById("gpus").value = String(preset.gpus);
    document.querySelectorAll('#gpu-choices input[name="gpu_id"]').forEach((box) => (box.checked = false));
    const parameters = document.getElementById("backend_parameters");
    parameters.value = preset.parameters.join("\n");
    parameters.rows = Math.max(4, preset.parameters.length);
    document.getElementById("env").value = Object.entries(preset.env).map(([key, entry]) => `${key}=${entry}`).join("\n");
    runPreflight();
  },
  known: (preset) => backends.some((b) => b.name === preset.backend && b.versions.some((v) => v.version === preset.version)),
});
document.getElementById("model").addEventListener("change", () => presets.load());

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const button = document.getElementById("deploy-button");
  button.disabled = true;
  replace(result, h("p", { class: "muted" }, "Deploying…"));
  try {
    const deployment = await api("/deployments", { method: "POST", json: requestBody() });
    replace(result, okBox("Deployed."));
    window.location.assign(`/deployments/${pathName(deployment.name)}`);
  } catch (error) {
    replace(result, errorBox(error));
    button.disabled = false;
  }
});

async function load() {
  const [models, catalog, inventory] = await Promise.all([api("/models"), api("/backends"), api("/gpus")]);
  backends = catalog;
  fillGpuChoices(inventory);
  const wanted = new URLSearchParams(location.search).get("model");
  const modelSelect = document.getElementById("model");
  replace(modelSelect, models.length ? models.map((m) => h("option", { value: m.name, selected: m.name === wanted }, `${m.name}${m.state !== "valid" ? ` (${m.state})` : ""}`)) : h("option", { value: "" }, "no models: add one first"));
  const wantedBackend = new URLSearchParams(location.search).get("backend") ?? "transformers";
  replace(backendSelect, catalog.map((b) => h("option", { value: b.name, selected: b.name === wantedBackend }, `${b.name}${b.builtin ? "" : " (custom)"}`)));
  fillVersions();
  runPreflight();
  await presets.load();
}

load();
