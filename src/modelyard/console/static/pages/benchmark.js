// One benchmark run: its progress while it runs, then its report (the HTML report of `modelyard
// bench report`, with its plotly charts) below the headline figures.
import { api, errorBox, facts, fitFrame, formatTime, h, main, poll, replace, table } from "../console.js";

const runId = main().dataset.runId;
const report = document.getElementById("report");
const output = document.getElementById("output");
fitFrame(report);
let stop = null;

function progressView(run) {
  const progress = run.progress;
  if (!progress || run.state !== "running") return null;
  const total = progress.requests_total;
  const done = progress.requests_done ?? 0;
  let share = 0;
  let text = `point ${progress.point_index + 1} of ${progress.point_count} (${progress.point_label}): ${done} requests done`;
  if (total) {
    share = done / total;
    text += ` of ${total}`;
  } else if (progress.duration_s) {
    const elapsed = Date.now() / 1000 - progress.point_started_unix_s;
    share = elapsed / progress.duration_s;
    text += `, ${Math.round(elapsed)} of ${progress.duration_s} s`;
  }
  const fill = h("span");
  fill.style.width = `${Math.round(Math.min(1, share) * 100)}%`;
  return h("section", { class: "card" }, h("p", {}, text),
    h("div", { class: "progress-bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(Math.round(Math.min(1, share) * 100)), "aria-label": "progress of this load point" }, fill));
}

async function refresh() {
  const run = await api(`/benchmarks/${runId}`);
  const state = document.getElementById("state");
  state.textContent = run.state;
  state.className = `badge ${run.state}`;
  replace(document.getElementById("summary"),
    h("section", { class: "card" }, facts({ deployment: run.deployment, ...run.config, created_at: formatTime(run.created_at) })),
    run.error ? errorBox({ message: run.error, hint: run.hint }) : null,
    run.points ? table(
      [
        ["concurrency", (p) => String(p.load)],
        ["valid", (p) => (p.valid ? "yes" : "no")],
        ["requests", (p) => String(p.requests_succeeded)],
        ["requests/s", (p) => p.requests_per_s?.toFixed(2) ?? "–"],
        ["output tokens/s", (p) => p.output_tokens_per_s?.toFixed(1) ?? "–"],
        ["TTFT median (ms)", (p) => p.ttft_median_ms?.toFixed(1) ?? "–"],
        ["TPOT median (ms)", (p) => p.tpot_median_ms?.toFixed(2) ?? "–"],
      ],
      run.points,
    ) : null);
  replace(document.getElementById("progress"), progressView(run));
  if (run.state === "succeeded" || run.state === "failed") {
    stop?.();
    if (run.has_report && report.hidden) {
      report.hidden = false;
      report.src = `/api/v1/benchmarks/${runId}/report`;
    }
    if (run.state === "failed") {
      output.hidden = false;
      output.textContent = await api(`/benchmarks/${runId}/output`).catch(() => "");
    }
  }
}

stop = poll(() => refresh().catch((error) => replace(document.getElementById("summary"), errorBox(error))), 1500);
