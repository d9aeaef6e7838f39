// One deployment: its instances (every field the API gives, shown generically), its events, the
// controls (scale, stop, start, delete, re-run verification) and the engine log, streamed live.
import { ApiError, api, badge, errorBox, facts, formatSeconds, formatTime, h, main, okBox, pathName, poll, replace, show, table } from "../console.js";

const name = main().dataset.name;
const path = `/deployments/${pathName(name)}`;
const controlResult = document.getElementById("control-result");
const logElement = document.getElementById("log");
const instanceSelect = document.getElementById("log-instance");
const startSelect = document.getElementById("log-start");
const follow = document.getElementById("log-follow");
let current = null;
let logAbort = null;
let logKey = "";
let replicasTouched = false;

document.getElementById("try").href = `/playground?deployment=${encodeURIComponent(name)}`;

function verificationList(checks) {
  if (!checks?.length) return "–";
  return h("ul", { class: "findings" }, checks.map((check) =>
    h("li", { class: check.passed === false || check.status === "failed" ? "error" : "info" },
      badge(check.status ?? (check.passed ? "passed" : "failed")), " ", check.name ?? check.check_id ?? "", ": ", check.message ?? check.detail ?? "")));
}

function instanceCard(instance) {
  const shown = { ...instance };
  const special = {
    state: badge(instance.state),
    uptime_seconds: formatSeconds(instance.uptime_seconds),
    started_at: formatTime(instance.started_at),
    ready_at: formatTime(instance.ready_at),
    next_start_at: formatTime(instance.next_start_at),
    command: instance.command?.length ? h("code", {}, instance.command.join(" ")) : "–",
    verification: verificationList(instance.verification),
  };
  const list = facts(
    Object.fromEntries(Object.entries(shown).filter(([key]) => !(key in special))),
    { labels: { replica_index: "replica", gpu_ids: "GPUs", pid: "pid" } },
  );
  for (const [key, value] of Object.entries(special)) {
    if (key in instance) list.append(h("dt", {}, key.replaceAll("_", " ")), h("dd", {}, value));
  }
  return h("article", { class: "card instance", dataset: { replica: instance.replica_index, state: instance.state } },
    h("h3", {}, `Replica ${instance.replica_index} `, badge(instance.state)), list);
}

function fillLogChoices(deployment) {
  const wantedInstance = instanceSelect.value;
  replace(instanceSelect, deployment.instances.map((i) => h("option", { value: i.id, selected: String(i.id) === wantedInstance }, `replica ${i.replica_index} (instance ${i.id})`)));
  const instance = deployment.instances.find((i) => String(i.id) === instanceSelect.value) ?? deployment.instances[0];
  const wantedStart = startSelect.value;
  const starts = instance?.start_count ?? 0;
  const options = [h("option", { value: "current", selected: wantedStart !== "previous" }, `current start${starts ? ` (#${starts})` : ""}`)];
  if (starts > 1) options.push(h("option", { value: "previous", selected: wantedStart === "previous" }, `previous start (#${starts - 1})`));
  replace(startSelect, options);
}

async function streamLog() {
  const instanceId = instanceSelect.value;
  const instance = current?.instances.find((i) => String(i.id) === instanceId);
  if (!instance?.log_path) {
    if (!logElement.textContent) logElement.textContent = "No log yet: the engine has not been started.";
    return;
  }
  const previous = startSelect.value === "previous";
  const key = `${instanceId}/${previous}/${follow.checked}`;
  if (!instanceId || key === logKey) return;
  logKey = key;
  logAbort?.abort();
  const abort = new AbortController();
  logAbort = abort;
  logElement.textContent = "";
  logElement.dataset.instance = instanceId;
  const query = new URLSearchParams({ instance: instanceId, tail: "500" });
  if (previous) query.set("previous", "true");
  else if (follow.checked) query.set("follow", "true");
  try {
    const response = await api(`${path}/logs?${query}`, { raw: true, signal: abort.signal });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const atBottom = logElement.scrollTop + logElement.clientHeight >= logElement.scrollHeight - 8;
      logElement.append(decoder.decode(value, { stream: true }));
      if (atBottom) logElement.scrollTop = logElement.scrollHeight;
    }
  } catch (error) {
    if (abort.signal.aborted) return;
    logElement.textContent = error instanceof ApiError ? `${error.message}${error.hint ? ` (${error.hint})` : ""}` : String(error);
  }
  if (logAbort === abort) logKey = "";  // ended: the next refresh may start it again
}

for (const element of [instanceSelect, startSelect, follow]) element.addEventListener("change", () => streamLog());

async function refresh() {
  let deployment;
  try {
    deployment = await api(path);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) {
      replace(document.getElementById("summary"), errorBox({ message: `Deployment ${name} no longer exists.`, hint: "see the deployments list" }));
      document.getElementById("state").textContent = "gone";
      logAbort?.abort();
      return;
    }
    throw error;
  }
  current = deployment;
  const state = document.getElementById("state");
  state.textContent = deployment.state;
  state.className = `badge ${deployment.state}`;
  const summary = { ...deployment };
  delete summary.instances;
  delete summary.name;
  delete summary.state;
  const warnings = summary.warnings;
  delete summary.warnings;
  replace(document.getElementById("summary"), h("section", { class: "card" }, facts(summary, { labels: { env: "environment" } })),
    warnings?.length ? h("section", { class: "warn" }, h("strong", {}, "Doctor's warnings at deploy time"), h("ul", {}, warnings.map((w) => h("li", {}, w.message, w.fix ? ` Fix: ${w.fix}` : "")))) : null);
  if (!replicasTouched) document.getElementById("replicas").value = deployment.replicas;
  replace(document.getElementById("instances"), deployment.instances.length ? deployment.instances.map(instanceCard) : h("p", { class: "muted" }, "No instances."));
  fillLogChoices(deployment);
  streamLog();
  const events = await api(`${path}/events?limit=100`);
  replace(document.getElementById("events"), table(
    [["at", (e) => formatTime(e.at)], ["replica", (e) => String(e.replica_index)], ["from", (e) => e.from_state], ["to", (e) => badge(e.to_state)], ["reason", (e) => show(e.reason)]],
    events.slice().reverse(),
    { empty: "No events yet." },
  ));
}

document.getElementById("replicas").addEventListener("input", () => { replicasTouched = true; });

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

document.getElementById("scale").addEventListener("click", () =>
  control("Scale", () => api(path, { method: "PATCH", json: { replicas: Number(document.getElementById("replicas").value) } })));
document.getElementById("stop").addEventListener("click", () => control("Stop", () => api(`${path}/stop`, { method: "POST" })));
document.getElementById("start").addEventListener("click", () => control("Start", () => api(`${path}/start`, { method: "POST" })));
document.getElementById("verify").addEventListener("click", () => control("Verification", () => api(`${path}/verify`, { method: "POST" })));
document.getElementById("delete").addEventListener("click", () => {
  if (!confirm(`Delete deployment ${name}? Its engines are stopped.`)) return;
  control("Delete", () => api(path, { method: "DELETE" }));
});

poll(refresh, 2000);
