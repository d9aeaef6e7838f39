// One deployment: its instances (instance_card.js), its events, the controls (scale, stop, start,
// delete, re-run verification, its result shown as it comes back) and the engine log of any start
// (engine_log.js), its limits for every key together (deployment_limits.js), its autoscale
// (deployment_autoscale.js, for the roles that may change it).
import { ApiError, api, badge, errorBox, formatTime, h, main, okBox, pathName, poll, replace, show, table } from "../console.js";
import { DeploymentAutoscale } from "./deployment_autoscale.js";
import { DeploymentLimits } from "./deployment_limits.js";
import { settingsList } from "./deployment_settings.js";
import { EngineLog } from "./engine_log.js";
import { instanceCard } from "./instance_card.js";

const name = main().dataset.name;
const path = `/deployments/${pathName(name)}`;
const controlResult = document.getElementById("control-result");
// The engine log is for operators and admins: a member's page has no log section.
const log = document.getElementById("log") ? new EngineLog(path) : null;
const limits = new DeploymentLimits(path, () => refresh());
// Only for a role that may change deployments: the page has no autoscale form otherwise.
const autoscale = document.getElementById("autoscale-form") ? new DeploymentAutoscale(path, () => refresh()) : null;
let replicasTouched = false;
// A verification asked for: each instance's verified_at when it was asked; done when all changed.
let verifying = null;

document.getElementById("try").href = `/playground?deployment=${encodeURIComponent(name)}`;

function checkCounts(checks) {
  const counts = {};
  for (const check of checks ?? []) counts[check.status] = (counts[check.status] ?? 0) + 1;
  return Object.entries(counts).map(([status, count]) => `${count} ${status}`).join(", ") || "no checks";
}

function verificationOutcome(deployment) {
  if (!verifying) return;
  const asked = deployment.instances.filter((i) => verifying.before.has(i.id));
  const done = asked.filter((i) => i.verified_at && i.verified_at !== verifying.before.get(i.id));
  if (done.length < asked.length) {
    replace(controlResult, h("p", { class: "muted", role: "status" },
      `Verification running on ${asked.length - done.length} of ${asked.length} instance(s)…`));
    return;
  }
  verifying = null;
  const failed = done.some((i) => (i.verification ?? []).some((check) => check.status === "failed"));
  const lines = done.map((i) => {
    const failedChecks = (i.verification ?? []).filter((check) => check.status === "failed").map((check) => check.check_id);
    return h("li", {}, `replica ${i.replica_index}: ${checkCounts(i.verification)} (${formatTime(i.verified_at)})`,
      failedChecks.length ? `; failed: ${failedChecks.join(", ")}; kept out of rotation ` : "; in rotation ", badge(i.state));
  });
  const body = [h("p", {}, h("strong", {}, failed ? "Verification failed" : "Verification passed")), h("ul", {}, lines)];
  replace(controlResult, failed ? h("div", { class: "error", role: "alert" }, ...body) : okBox(...body));
}

function showSummary(deployment) {
  const warnings = deployment.warnings;
  replace(document.getElementById("summary"), h("div", { class: "card" }, settingsList(deployment)),
    warnings?.length ? h("section", { class: "warn" }, h("strong", {}, "Doctor's warnings at deploy time"), h("ul", {}, warnings.map((w) => h("li", {}, w.message, w.fix ? ` Fix: ${w.fix}` : "")))) : null);
}

// An event is an instance's transition, or an autoscale decision (replicas from → to, or unplaced).
const eventSource = (e) => (e.kind === "autoscale" ? "autoscaler" : String(e.replica_index));
const eventFrom = (e) => (e.kind === "autoscale" ? `${e.from_replicas} replica(s)` : e.from_state);
function eventTo(e) {
  if (e.kind !== "autoscale") return badge(e.to_state);
  return e.direction === "unplaced" ? badge("unplaced") : `${e.to_replicas} replica(s) (${e.direction})`;
}

// The sections that say "Loading…" until the first answer, and say why when it fails.
const LOADING = ["instances", "summary", "events"];

async function refresh() {
  let deployment;
  try {
    deployment = await api(path);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      for (const id of LOADING) replace(document.getElementById(id));
      replace(document.getElementById("summary"), errorBox({ message: `Deployment ${name} no longer exists.`, hint: "see the deployments list" }));
      document.getElementById("state").textContent = "gone";
      main().removeAttribute("aria-busy");
      log?.stop();
      return;
    }
    if (main().hasAttribute("aria-busy")) {
      replace(document.getElementById("instances"), errorBox({ message: `Could not read deployment ${name}: ${error.message}`, hint: "the page tries again every 2 s" }));
    }
    throw error;
  }
  main().removeAttribute("aria-busy");
  const state = document.getElementById("state");
  state.textContent = deployment.state;
  state.className = `badge ${deployment.state}`;
  showSummary(deployment);
  limits.show(deployment);
  await autoscale?.show();
  const replicas = document.getElementById("replicas");
  if (replicas && !replicasTouched) replicas.value = deployment.replicas;
  replace(document.getElementById("instances"), deployment.instances.length
    ? deployment.instances.map((instance) => instanceCard(instance, deployment.model_path, { verifying: Boolean(verifying?.before.has(instance.id)) }))
    : h("p", { class: "muted" }, "No instances."));
  verificationOutcome(deployment);
  await log?.show(deployment.instances);
  const events = await api(`${path}/events?limit=100`);
  replace(document.getElementById("events"), table(
    [["at", (e) => formatTime(e.at)], ["replica", eventSource], ["from", eventFrom], ["to", eventTo], ["reason", (e) => show(e.reason)]],
    events.slice().reverse(),
    { empty: "No events yet." },
  ));
}

document.getElementById("replicas")?.addEventListener("input", () => { replicasTouched = true; });

async function control(label, call) {
  replace(controlResult, h("p", { class: "muted" }, `${label}…`));
  try {
    await call();
    replace(controlResult, okBox(`${label}: done.`));
    replicasTouched = false;
    await refresh();
  } catch (error) {
    replace(controlResult, errorBox(error));
  }
}

async function verify() {
  const button = document.getElementById("verify");
  button.disabled = true;
  replace(controlResult, h("p", { class: "muted" }, "Asking for verification…"));
  try {
    // 202: the controller runs the suite on every instance with an engine; the polls show the result.
    const deployment = await api(`${path}/verify`, { method: "POST" });
    const asked = deployment.instances.filter((i) => i.engine_id && (i.state === "running" || i.state === "error"));
    verifying = { before: new Map(asked.map((i) => [i.id, i.verified_at])) };
    await refresh();
  } catch (error) {
    verifying = null;
    replace(controlResult, errorBox(error));
  } finally {
    button.disabled = false;
  }
}

// The controls the user's role may not use are not on the page (the server leaves them out).
document.getElementById("scale")?.addEventListener("click", () =>
  control("Scale", () => api(path, { method: "PATCH", json: { replicas: Number(document.getElementById("replicas").value) } })));
document.getElementById("stop")?.addEventListener("click", () => control("Stop", () => api(`${path}/stop`, { method: "POST" })));
document.getElementById("start")?.addEventListener("click", () => control("Start", () => api(`${path}/start`, { method: "POST" })));
document.getElementById("verify")?.addEventListener("click", verify);
document.getElementById("delete")?.addEventListener("click", () => {
  if (!confirm(`Delete deployment ${name}? Its engines are stopped.`)) return;
  control("Delete", () => api(path, { method: "DELETE" }));
});

poll(refresh, 2000);
