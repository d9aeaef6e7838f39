// One tune: its winners per SLO, the gain over the engine's defaults, the deployment to create
// (command and REST body), the Pareto front and every candidate with its figures, speculative
// acceptance or the reason it was dropped (GET /api/v1/tunes/ID: report.json of docs/tune.md).
import { api, badge, copyText, errorBox, facts, formatSeconds, h, main, poll, replace, table } from "../console.js";

const tuneId = main().dataset.tuneId;
const POLL_MS = 3000;

function figure(value) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(1);
}

function sloKeys(report) {
  return report.slos.map((text) => `${text.split("<=")[0]}_ms`);
}

/** A candidate's speculative acceptance at its deepest rung: "50% (3.0 tokens/step)", or "–". */
function acceptance(row) {
  const deepest = row.measurements.at(-1);
  const figures = deepest?.speculation;
  if (!figures || (figures.acceptance_ratio == null && figures.mean_acceptance_length == null)) return "–";
  const parts = [];
  if (figures.acceptance_ratio != null) parts.push(`${Math.round(figures.acceptance_ratio * 100)}%`);
  if (figures.mean_acceptance_length != null) parts.push(`(${figures.mean_acceptance_length.toFixed(1)} tokens/step)`);
  return parts.join(" ");
}

function bestWithinSlos(row) {
  const deepest = row.measurements.at(-1);
  const meeting = (deepest?.points ?? []).filter((point) => point.meets_slos).map((point) => point.throughput);
  return meeting.length ? figure(Math.max(...meeting)) : "–";
}

function winners(report) {
  const keys = sloKeys(report);
  const gain = report.gain_over_defaults;
  const gainText = gain?.winner_is_defaults
    ? "The engine's defaults won: no knob tried did better."
    : gain?.ratio
      ? `${gain.ratio.toFixed(2)}x the throughput of the engine's defaults (${gain.defaults}).`
      : null;
  return [
    table(
      [
        ["SLOs", (w) => w.slos],
        ["candidate", (w) => w.label],
        ["load", (w) => String(w.load)],
        ["throughput (tokens/s)", (w) => figure(w.throughput)],
        ...keys.map((key) => [key, (w) => figure(w[key])]),
      ],
      report.winners,
      { empty: "No candidate met the SLOs at any load measured.", caption: "Winners" },
    ),
    gainText ? h("p", { id: "gain" }, gainText) : null,
    eachEnginesGain(report),
  ];
}

// The winner against every engine's defaults, with the measured figures (report.json's text).
function eachEnginesGain(report) {
  const gains = (report.gains_over_each_engines_defaults ?? []).filter((gain) => !gain.is_winner);
  if (!gains.length) return null;
  return h("ul", { id: "gains", "aria-label": "the winner against each engine's defaults" },
    ...gains.map((gain) => h("li", {}, `Against ${gain.defaults}: ${gain.text}`)));
}

function deploy(report) {
  if (!report.deploy) return h("p", { class: "muted" }, "No winner to deploy.");
  const copy = h("button", { type: "button", class: "secondary", id: "copy-deploy", "data-route": "local" }, "Copy");
  copy.addEventListener("click", () => copyText(report.deploy.command, copy));
  return [
    h("pre", { class: "log", id: "deploy-command", tabindex: "0", "aria-label": "the deploy command" }, report.deploy.command),
    h("p", {}, copy),
    h("details", {}, h("summary", {}, "As the body of POST /api/v1/deployments"),
      h("pre", { class: "log", tabindex: "0", "aria-label": "the deployment body" }, JSON.stringify(report.deploy.body, null, 2))),
  ];
}

function pareto(report) {
  const key = sloKeys(report)[0];
  return table(
    [
      ["candidate", (p) => p.label],
      ["load", (p) => String(p.load)],
      ["throughput (tokens/s)", (p) => figure(p.throughput)],
      [key, (p) => figure(p[key])],
    ],
    report.pareto_front,
    { empty: "Nothing measured yet.", caption: "Pareto front" },
  );
}

function candidates(report) {
  return table(
    [
      ["rank", (c) => (c.rank ? String(c.rank) : "–")],
      ["candidate", (c) => c.label],
      ["flags", (c) => h("code", {}, c.arguments.join(" ") || "(none)")],
      ["deepest rung", (c) => (c.measurements.length ? String(c.measurements.at(-1).rung) : "–")],
      ["best throughput within SLOs", bestWithinSlos],
      ["speculative acceptance", acceptance],
      ["dropped", (c) => (c.dropped ? `${c.dropped.stage}: ${c.dropped.reason}` : "")],
    ],
    report.candidates,
    { caption: "Every candidate" },
  );
}

async function refresh() {
  let tune;
  try {
    tune = await api(`/tunes/${encodeURIComponent(tuneId)}`);
  } catch (error) {
    replace(document.getElementById("summary"), errorBox(error));
    return;
  }
  const state = document.getElementById("state");
  state.textContent = tune.state;
  state.className = `badge ${tune.state}`;
  replace(
    document.getElementById("summary"),
    h("section", { class: "card" },
      facts({
        model: tune.model,
        gpus: tune.gpus,
        workload: tune.workload,
        slos: tune.slos,
        runs: tune.runs,
        starts: tune.starts,
        time_spent: formatSeconds(tune.spent_s),
        stopped: tune.stopped_reason,
        go_on_with: h("code", {}, tune.resume_command),
      })),
  );
  const report = tune.report;
  if (!report) {
    const waiting = h("p", { class: "muted" }, "No report yet: the tune is measuring, or stopped before its end (go on with the command above).");
    for (const id of ["winners", "deploy", "pareto", "candidates"]) replace(document.getElementById(id), waiting.cloneNode(true));
    return;
  }
  replace(document.getElementById("winners"), winners(report));
  replace(document.getElementById("deploy"), deploy(report));
  replace(document.getElementById("pareto"), pareto(report));
  replace(document.getElementById("candidates"), candidates(report));
}

poll(refresh, POLL_MS);
