// One instance of a deployment as a card: where its engine runs (runtime, engine, GPUs), where it
// listens (the gateway's address and the engine's own port), the model directory as the host and
// as the engine see it, its verification and diagnosis, its command. Fields the page does not know
// yet are listed at the end, so that nothing the REST API gives is hidden.
import { badge, facts, formatSeconds, formatTime, h, show } from "../console.js";
import { instancePlacement } from "./deployment_settings.js";

// Every field placed in a section below; the rest go to "Other fields".
const PLACED = new Set([
  "id", "uid", "replica_index", "state", "reason", "runtime", "engine", "engine_id", "host", "port",
  "engine_port", "mounts", "gpu_ids", "pid", "start_count", "restart_count", "next_start_at",
  "started_at", "ready_at", "uptime_seconds", "diagnosis", "verification", "verified_at", "log_path",
  "command", "placement", "image_pull", "stage",
]);

function definitions(rows) {
  return h("dl", { class: "facts" }, rows.filter(Boolean).map(([term, value, attributes = {}]) =>
    [h("dt", {}, term), h("dd", attributes, value)]));
}

function section(title, ...children) {
  return h("section", { class: "part" }, h("h4", {}, title), ...children);
}

function engineSection(instance) {
  return section(
    "Engine",
    definitions([
      ["runtime", instance.runtime ?? "–", { "data-field": "runtime" }],
      ["engine", instance.engine ? h("code", {}, instance.engine) : "not running", { "data-field": "engine" }],
      ["engine id", instance.engine_id ? h("code", {}, instance.engine_id) : "–", { "data-field": "engine_id" }],
      ["GPUs", instance.gpu_ids?.length ? instance.gpu_ids.join(", ") : "none (CPU)"],
      ["uptime", formatSeconds(instance.uptime_seconds)],
      ["starts", `${instance.start_count ?? 0} (restarts ${instance.restart_count ?? 0})`],
      ["started", formatTime(instance.started_at)],
      ["ready", formatTime(instance.ready_at)],
      instance.next_start_at ? ["next start", formatTime(instance.next_start_at)] : null,
    ]),
  );
}

function formatBytes(bytes) {
  for (const [unit, scale] of [["GB", 1e9], ["MB", 1e6], ["kB", 1e3]]) {
    if (bytes >= scale) return `${(bytes / scale).toFixed(1)} ${unit}`;
  }
  return `${bytes ?? 0} B`;
}

/** The image pull of the current start: a progress bar while it pulls, what came down after. */
function pullSection(instance) {
  const pull = instance.image_pull;
  if (!pull) return null;
  const downloaded = pull.downloaded_bytes ?? 0;
  const total = pull.total_bytes;
  const bytes = total != null ? `${formatBytes(downloaded)} of ${formatBytes(total)}` : formatBytes(downloaded);
  const seconds = pull.seconds ?? pull.elapsed_seconds;
  return section(
    "Image pull",
    definitions([
      ["image", h("code", {}, pull.image ?? "–"), { "data-field": "pull_image" }],
      ["state", pull.state === "pulling" ? badge("pulling") : pull.state, { "data-field": "pull_state" }],
      ["policy", pull.policy ?? "–"],
      ["layers", `${pull.layers_done ?? pull.layers_total ?? 0} of ${pull.layers_total ?? 0}${pull.layers_present ? ` (${pull.layers_present} already here)` : ""}`, { "data-field": "pull_layers" }],
      ["bytes", pull.state === "pulling" && total
        ? [h("progress", { value: String(downloaded), max: String(total), "aria-label": "bytes pulled" }), " ", bytes]
        : bytes, { "data-field": "pull_bytes" }],
      seconds != null ? ["time", `${Number(seconds).toFixed(1)} s`] : null,
      pull.error ? ["error", pull.error, { class: "error" }] : null,
    ]),
  );
}

function placementSection(instance) {
  const rows = instancePlacement(instance);
  return rows ? section("Placement", definitions(rows)) : null;
}

function networkSection(instance) {
  const reached = instance.host && instance.port ? `${instance.host}:${instance.port}` : "–";
  return section(
    "Network",
    definitions([
      ["gateway reaches", h("code", {}, reached), { "data-field": "address" }],
      ["engine listens on", instance.engine_port ? `port ${instance.engine_port}${instance.engine_port !== instance.port ? " (inside its network)" : ""}` : "–", { "data-field": "engine_port" }],
    ]),
  );
}

/** The mount of the model directory, the others (extra volumes), from the runtime's mounts. */
function splitMounts(instance, modelPath) {
  const mounts = instance.mounts ?? [];
  const model = mounts.find((mount) => mount.host_path === modelPath) ?? null;
  return { model, others: mounts.filter((mount) => mount !== model) };
}

function modelSection(instance, modelPath) {
  const { model, others } = splitMounts(instance, modelPath);
  // A process runs on this host and opens the directory where it is; a container through its mount.
  const enginePath = model ? model.engine_path : instance.runtime === "process" || !instance.mounts?.length ? modelPath : null;
  const how = model ? `mounted${model.read_only ? " read-only" : " read-write"}` : "the same path (no mount: the engine runs on this host)";
  return section(
    "Model directory",
    definitions([
      ["on the host", h("code", {}, modelPath ?? "–"), { "data-field": "host_path" }],
      ["in the engine", h("code", {}, enginePath ?? "–"), { "data-field": "engine_path" }],
      ["how", how],
      others.length ? ["other mounts", h("ul", { class: "plain" }, others.map((mount) =>
        h("li", {}, h("code", {}, mount.host_path), " → ", h("code", {}, mount.engine_path), mount.read_only ? " (read-only)" : "")))] : null,
    ]),
  );
}

function verificationSection(instance, waiting) {
  const checks = instance.verification ?? [];
  const counts = {};
  for (const check of checks) counts[check.status] = (counts[check.status] ?? 0) + 1;
  const summary = checks.length ? Object.entries(counts).map(([status, count]) => `${count} ${status}`).join(", ") : "not run";
  return h("section", { class: "part wide" }, h("h4", {}, "Verification"),
    h("p", { class: "muted", "data-field": "verified_at" },
      instance.verified_at ? `last run ${formatTime(instance.verified_at)}: ${summary}` : "not run yet",
      waiting ? h("span", { class: "badge starting" }, "running again…") : null),
    checks.length ? h("ul", { class: "findings checks" }, checks.map((check) =>
      h("li", { class: check.status === "failed" ? "error" : check.status === "skipped" ? "warning" : "info", dataset: { check: check.check_id ?? "" } },
        badge(check.status), " ", h("strong", {}, check.check_id ?? ""), ": ", check.message ?? ""))) : null,
  );
}

function otherSection(instance) {
  const rest = Object.fromEntries(Object.entries(instance).filter(([key]) => !PLACED.has(key)));
  return Object.keys(rest).length ? section("Other fields", facts(rest)) : null;
}

/** The card of `instance`; `modelPath` is the deployment's model directory on the host. */
export function instanceCard(instance, modelPath, { verifying = false } = {}) {
  return h(
    "article",
    { class: "card instance", dataset: { replica: instance.replica_index, state: instance.state, instance: instance.id } },
    h("h3", {}, `Replica ${instance.replica_index} `, badge(instance.state), instance.stage ? [" ", badge(instance.stage)] : null, h("span", { class: "muted small" }, ` instance ${instance.id} · ${instance.uid ?? ""}`)),
    h("p", { class: "reason" }, show(instance.reason)),
    instance.diagnosis ? h("div", { class: "error", role: "note" }, h("strong", {}, "Diagnosis: "), instance.diagnosis) : null,
    h("div", { class: "parts" }, engineSection(instance), pullSection(instance), placementSection(instance), networkSection(instance), modelSection(instance, modelPath), verificationSection(instance, verifying)),
    otherSection(instance),
    h("details", { class: "command" }, h("summary", {}, "Command and log file"),
      definitions([
        ["command", instance.command?.length ? h("code", {}, instance.command.join(" ")) : "–"],
        ["log file", instance.log_path ? h("code", {}, instance.log_path) : "–"],
      ])),
  );
}
