// Tunes: the `modelyard tune` runs of this server's data directory (GET /api/v1/tunes); the form
// starts one on this server's host (POST /api/v1/tunes, each bad field's error shown beside it),
// or gives the command that does.
import { ApiError, api, badge, copyText, errorBox, formatSeconds, formatTime, h, okBox, poll, replace, table } from "../console.js";

const POLL_MS = 3000;
const FIELDS = ["model", "gpus", "backends", "workload", "slo", "max_num_seqs", "speculative", "budget"];
// The fields the server checks, each with its error line beside it.
const CHECKED = ["model", "gpus", "backends", "workload", "workload_file", "slo", "budget"];

/** One shell word: quoted when it holds anything a shell would read. */
function shellWord(word) {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

function value(id) {
  return document.getElementById(id).value.trim();
}

/** The `modelyard tune` command the form describes. */
function command() {
  const words = ["modelyard", "tune", value("model") || "MODEL", "--gpus", value("gpus"), "--workload", value("workload"), "--slo", value("slo"), "--backends", value("backends"), "--max-num-seqs", value("max_num_seqs")];
  if (value("speculative") && value("speculative") !== "off") words.push("--speculative", value("speculative"));
  if (value("budget")) words.push("--budget", value("budget"));
  return words.map(shellWord).join(" ");
}

function showCommand() {
  document.getElementById("tune-command").textContent = command();
}

async function fillModels() {
  const models = await api("/models");
  const select = document.getElementById("model");
  replace(select, models.map((model) => h("option", { value: model.name }, model.name)));
  showCommand();
}

function throughput(tune) {
  if (tune.winner_throughput === null || tune.winner_throughput === undefined) return "–";
  const gain = tune.gain_over_defaults ? ` (${tune.gain_over_defaults.toFixed(2)}x the defaults)` : "";
  return `${tune.winner_throughput.toFixed(1)} tokens/s${gain}`;
}

async function refresh() {
  const tunes = await api("/tunes");
  replace(
    document.getElementById("tunes"),
    table(
      [
        ["tune", (t) => h("a", { href: `/tunes/${encodeURIComponent(t.tune_id)}`, class: "mono" }, t.tune_id)],
        ["model", (t) => t.model ?? "–"],
        ["GPUs", (t) => t.gpus ?? "–"],
        ["workload", (t) => t.workload ?? "–"],
        ["SLOs", (t) => t.slos.join(", ") || "–"],
        ["state", (t) => badge(t.state)],
        ["runs", (t) => `${t.runs} runs, ${t.starts} starts`],
        ["time spent", (t) => formatSeconds(t.spent_s)],
        ["winner", (t) => t.winner ?? "–"],
        ["throughput", throughput],
        ["updated", (t) => formatTime(new Date(t.updated_at * 1000).toISOString())],
      ],
      tunes,
      { empty: "No tune yet: start one above.", caption: "Tunes" },
    ),
  );
}

function clearErrors() {
  for (const field of CHECKED) {
    const line = document.getElementById(`${field}-error`);
    line.hidden = true;
    line.textContent = "";
    document.getElementById(field).removeAttribute("aria-invalid");
  }
}

function showFieldError(field, error) {
  const line = document.getElementById(`${field}-error`);
  line.textContent = error.hint ? `${error.message}. Fix: ${error.hint}` : error.message;
  line.hidden = false;
  const input = document.getElementById(field);
  input.setAttribute("aria-invalid", "true");
  input.focus();
}

async function startTune(event) {
  event.preventDefault();
  clearErrors();
  const result = document.getElementById("start-result");
  replace(result);
  const button = document.getElementById("start-tune");
  const file = document.getElementById("workload_file").files[0];
  const body = {
    model: value("model"),
    gpus: value("gpus"),
    backends: value("backends"),
    workload: value("workload"),
    slo: value("slo"),
    budget: value("budget") || null,
    workload_file: file ? await file.text() : null,
  };
  button.disabled = true;
  try {
    const started = await api("/tunes", { method: "POST", json: body });
    replace(
      result,
      okBox(
        "Tune ",
        h("a", { href: `/tunes/${encodeURIComponent(started.tune_id)}`, class: "mono" }, started.tune_id),
        " started on this server's host (its output: ",
        h("code", {}, started.log_path),
        ").",
      ),
    );
    await refresh();
  } catch (error) {
    const field = error instanceof ApiError ? error.details?.field : null;
    if (field && CHECKED.includes(field)) showFieldError(field, error);
    else replace(result, errorBox(error));
  } finally {
    button.disabled = false;
  }
}

document.getElementById("tune-form").addEventListener("submit", startTune);
for (const id of FIELDS) document.getElementById(id).addEventListener("input", showCommand);
const copy = document.getElementById("copy-command");
copy.addEventListener("click", () => copyText(command(), copy));
showCommand();
fillModels();
poll(refresh, POLL_MS);
