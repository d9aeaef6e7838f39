// Benchmarks: start a run against a deployment, list past runs, compare two side by side.
import { api, badge, errorBox, fitFrame, formatTime, h, poll, replace, table } from "../console.js";

const form = document.getElementById("bench-form");
const result = document.getElementById("bench-result");
const compareFrame = document.getElementById("compare-frame");
fitFrame(compareFrame);

function numberOrNull(id) {
  const text = document.getElementById(id).value.trim();
  return text === "" ? null : Number(text);
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const concurrency = document.getElementById("concurrency").value.split(",").map((part) => part.trim()).filter(Boolean).map(Number);
  const duration = numberOrNull("duration_s");
  const body = {
    deployment: document.getElementById("deployment").value,
    concurrency,
    input_tokens: numberOrNull("input_tokens") ?? 128,
    output_tokens: numberOrNull("output_tokens") ?? 64,
    num_requests: duration === null ? numberOrNull("num_requests") : null,
    duration_s: duration,
  };
  try {
    const run = await api("/benchmarks", { method: "POST", json: body });
    window.location.assign(`/benchmarks/${run.id}`);
  } catch (error) {
    replace(result, errorBox(error));
  }
});

document.getElementById("compare-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const a = document.getElementById("compare-a").value;
  const b = document.getElementById("compare-b").value;
  if (!a || !b || a === b) {
    replace(result, errorBox({ message: "Choose two different finished runs to compare." }));
    return;
  }
  compareFrame.hidden = false;
  compareFrame.closest(".report-wrap").hidden = false;
  compareFrame.src = `/api/v1/benchmarks/compare?runs=${encodeURIComponent(a)},${encodeURIComponent(b)}`;
});

let knownFinished = "";

async function refresh() {
  const runs = await api("/benchmarks");
  replace(document.getElementById("runs"), table(
    [
      ["run", (r) => h("a", { href: `/benchmarks/${r.id}` }, r.id)],
      ["deployment", (r) => r.deployment],
      ["state", (r) => badge(r.state)],
      ["load", (r) => `concurrency ${r.config.concurrency.join(", ")}`],
      ["tokens", (r) => `${r.config.input_tokens} in / ${r.config.output_tokens} out`],
      ["output tokens/s", (r) => (r.points ?? []).map((p) => p.output_tokens_per_s?.toFixed(1) ?? "–").join(" / ") || "–"],
      ["started", (r) => formatTime(r.created_at)],
    ],
    runs,
    { empty: "No runs yet." },
  ));
  const finished = runs.filter((r) => r.has_report);
  const signature = finished.map((r) => r.id).join(",");
  if (signature !== knownFinished) {
    knownFinished = signature;
    for (const [id, index] of [["compare-a", 1], ["compare-b", 0]]) {
      replace(document.getElementById(id), finished.map((r, position) => h("option", { value: r.id, selected: position === index }, `${r.id} (${r.deployment})`)));
    }
  }
}

async function load() {
  const deployments = await api("/deployments");
  const wanted = new URLSearchParams(location.search).get("deployment");
  replace(document.getElementById("deployment"), deployments.map((d) => h("option", { value: d.name, selected: d.name === wanted }, `${d.name} (${d.state})`)));
  poll(refresh, 3000);
}

load();
