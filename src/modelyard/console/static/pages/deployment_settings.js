// A deployment's settings as a reader wants them, not as JSON: the engine's flags as one command
// line (`--max-model-len 2048`), the environment as KEY=value lines, and where its replicas may go
// (placement) and where each one went (an instance's placement: worker, GPUs, memory booked).
import { facts, formatBytes, formatTime, h } from "../console.js";

// Characters a POSIX shell reads as they are; any other makes an argument quoted.
const SHELL_PLAIN = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** One argument as a shell would need it written (`'two words'`, `'it'"'"'s'`). */
export function shellQuote(argument) {
  const text = String(argument);
  if (text !== "" && SHELL_PLAIN.test(text)) return text;
  return `'${text.replaceAll("'", `'"'"'`)}'`;
}

/** An argument list as one command line: ["--max-model-len", "2048"] → "--max-model-len 2048". */
export function commandLine(argumentsList) {
  return argumentsList.map(shellQuote).join(" ");
}

function parameters(list) {
  return list?.length ? h("code", { "data-field": "backend_parameters" }, commandLine(list)) : "none";
}

function environment(env, secretNames) {
  const lines = Object.entries(env ?? {}).map(([name, value]) => `${name}=${value}`);
  for (const name of secretNames ?? []) if (!(name in (env ?? {}))) lines.push(`${name}=(secret)`);
  return lines.length ? h("ul", { class: "plain", "data-field": "env" }, lines.map((line) => h("li", {}, h("code", {}, line)))) : "none";
}

function gpuMemory(value) {
  if (value === "auto") return "booked from the memory estimate (auto)";
  return `${formatBytes(value)} booked per GPU`;
}

/** Where a deployment's replicas may go (its selectors), as one sentence. */
export function placementRule(deployment) {
  const placement = deployment.placement ?? {};
  const parts = [];
  if (placement.workers?.length) parts.push(`on worker ${placement.workers.join(" or ")}`);
  const labels = Object.entries(placement.worker_labels ?? {}).map(([key, value]) => `${key}=${value}`);
  if (labels.length) parts.push(`on workers labelled ${labels.join(", ")}`);
  if (placement.gpu_model) parts.push(`on GPUs named like ${placement.gpu_model}`);
  if (placement.nodes && placement.nodes > 1) parts.push(`each replica over ${placement.nodes} hosts`);
  if (placement.gpu_memory !== undefined && placement.gpu_memory !== null) parts.push(gpuMemory(placement.gpu_memory));
  else if (deployment.gpu_ids?.length) parts.push(`GPUs ${deployment.gpu_ids.join(", ")}, whole`);
  else if (deployment.gpus_per_replica) parts.push(`${deployment.gpus_per_replica} whole GPU(s) per replica`);
  else parts.push("no GPU (CPU)");
  if (!placement.workers?.length && !labels.length) parts.unshift("any ready worker");
  return parts.join("; ");
}

/** An instance's placement: each rank's worker and GPUs, the memory booked, the knob set. */
export function instancePlacement(instance) {
  const placement = instance.placement;
  if (!placement?.ranks?.length) return null;
  const ranks = placement.ranks.map((rank, index) => {
    const worker = rank.worker_name || rank.worker_id;
    const gpus = rank.gpu_ids?.length ? `GPU ${rank.gpu_ids.join(", ")}` : "no GPU (CPU)";
    const rankName = placement.ranks.length > 1 ? `rank ${index}: ` : "";
    return `${rankName}worker ${worker} (${rank.host}), ${gpus}`;
  });
  const memory = placement.memory_bytes_per_gpu
    ? `${formatBytes(placement.memory_bytes_per_gpu)} per GPU`
    : ranks.length && placement.ranks.some((rank) => rank.gpu_ids?.length) ? "whole GPUs" : "none (CPU)";
  return [
    ["runs on", ranks.length > 1 ? h("ul", { class: "plain" }, ranks.map((line) => h("li", {}, line))) : ranks[0], { "data-field": "placement" }],
    ["memory booked", memory, { "data-field": "memory_booked" }],
    placement.memory_knob ? ["memory knob", h("code", {}, `${placement.memory_knob} ${placement.memory_fraction}`)] : null,
    placement.demand ? ["estimate", placement.demand] : null,
  ];
}

// Fields shown elsewhere on the page, or in a form of their own below.
const NOT_SETTINGS = ["instances", "name", "state", "warnings", "limits", "backend_parameters", "env", "secret_env", "placement"];

/** The settings of a deployment: every field the REST API gives, the known ones readable. */
export function settingsList(deployment) {
  const rest = { ...deployment };
  for (const key of NOT_SETTINGS) delete rest[key];
  for (const key of Object.keys(rest)) if (key.endsWith("_at")) rest[key] = formatTime(rest[key]);
  const list = facts(rest);
  list.classList.add("columns");
  const add = (term, value) => list.append(h("dt", {}, term), h("dd", {}, value));
  add("backend parameters", parameters(deployment.backend_parameters));
  add("environment", environment(deployment.env, deployment.secret_env));
  add("placement", h("span", { "data-field": "placement_rule" }, placementRule(deployment)));
  return list;
}
