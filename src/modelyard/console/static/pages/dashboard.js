// Dashboard: GPUs (live), deployments with state and reason, gateway traffic of the last minutes.
import { api, badge, formatBytes, h, pathName, poll, replace, table } from "../console.js";

const WINDOW_MINUTES = 15;
const BUCKET_SECONDS = 30;

// The server reads NVML every few seconds (the controller's GPU refresh); asking more often
// than this would show nothing new.
const GPU_POLL_MS = 2000;

function meter(share) {
  const fill = h("span");
  fill.style.width = `${Math.round(Math.min(1, Math.max(0, share)) * 100)}%`;
  return h("div", { class: "meter", "aria-hidden": "true" }, fill);
}

function percentOf(part, whole) {
  return whole ? Math.round((100 * part) / whole) : 0;
}

/** Power as NVML gives it: the draw, and the enforced limit where the board reports one. */
function power(gpu) {
  if (gpu.power_watts === null || gpu.power_watts === undefined) return "–";
  const limit = gpu.power_limit_watts ? ` of ${gpu.power_limit_watts.toFixed(0)} W` : "";
  return `${gpu.power_watts.toFixed(0)} W${limit}`;
}

function unit(value, suffix) {
  return value === null || value === undefined ? "–" : `${value} ${suffix}`;
}

function gpuCard(gpu) {
  const title = `GPU ${gpu.index} · ${gpu.name}`;
  const titleId = `gpu-${gpu.index}-${String(gpu.uuid).replace(/[^a-z0-9-]/gi, "")}`;
  const fact = (label, value, bar) => [h("dt", {}, label), h("dd", {}, value, bar)];
  return h(
    "article",
    { class: "card gpu", "aria-labelledby": titleId, dataset: { index: gpu.index } },
    h("h3", { id: titleId }, title),
    h(
      "dl",
      { class: "facts gpu-readings" },
      fact("utilization", unit(gpu.utilization_percent, "%"), meter((gpu.utilization_percent ?? 0) / 100)),
      fact("memory used", `${formatBytes(gpu.memory_used_bytes)} (${percentOf(gpu.memory_used_bytes, gpu.memory_total_bytes)} %)`, meter(gpu.memory_total_bytes ? gpu.memory_used_bytes / gpu.memory_total_bytes : 0)),
      fact("memory free", `${formatBytes(gpu.memory_free_bytes)} of ${formatBytes(gpu.memory_total_bytes)}`),
      fact("temperature", unit(gpu.temperature_celsius, "°C")),
      fact("power", power(gpu)),
    ),
  );
}

async function refreshGpus() {
  const inventory = await api("/gpus");
  const container = document.getElementById("gpus");
  const source = [inventory.driver_version && `driver ${inventory.driver_version}`, inventory.cuda_driver_version && `CUDA ${inventory.cuda_driver_version}`].filter(Boolean);
  replace(document.getElementById("gpus-source"), inventory.gpus.length && source.length ? `NVIDIA ${source.join(", ")}` : "");
  if (!inventory.gpus.length) {
    replace(container, h("p", { class: "muted" }, `No GPUs: ${inventory.unavailable_reason ?? "none found"}. CPU engines (transformers serve, custom) still run.`));
    return;
  }
  replace(container, inventory.gpus.map(gpuCard));
}

async function refreshDeployments() {
  const deployments = await api("/deployments");
  replace(
    document.getElementById("deployments"),
    table(
      [
        ["name", (d) => h("a", { href: `/deployments/${pathName(d.name)}` }, d.name)],
        ["state", (d) => badge(d.state)],
        ["replicas", (d) => `${d.instances.filter((i) => i.state === "running").length}/${d.replicas}`],
        ["backend", (d) => `${d.backend} ${d.backend_version}`],
        ["reason", (d) => d.instances.map((i) => i.reason).filter(Boolean)[0] ?? ""],
      ],
      deployments,
      { empty: "No deployments yet. Add a model, then deploy it." },
    ),
  );
}

function barChart(buckets) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const width = 600;
  const height = 120;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const peak = Math.max(1, ...buckets.map((b) => b.tokens_per_second));
  const step = width / Math.max(1, buckets.length);
  buckets.forEach((bucket, index) => {
    const bar = document.createElementNS(ns, "rect");
    const barHeight = ((height - 14) * bucket.tokens_per_second) / peak;
    bar.setAttribute("x", String(index * step + 1));
    bar.setAttribute("y", String(height - 12 - barHeight));
    bar.setAttribute("width", String(Math.max(1, step - 2)));
    bar.setAttribute("height", String(barHeight));
    bar.setAttribute("class", "bar");
    const title = document.createElementNS(ns, "title");
    title.textContent = `${new Date(bucket.start).toLocaleTimeString()}: ${bucket.tokens_per_second.toFixed(1)} tokens/s, ${bucket.requests} requests`;
    bar.append(title);
    svg.append(bar);
  });
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "2");
  label.setAttribute("y", String(height - 1));
  label.textContent = `peak ${peak.toFixed(1)} tokens/s; one bar per ${BUCKET_SECONDS} s`;
  svg.append(label);
  return svg;
}

async function refreshTraffic() {
  const timeline = await api(`/usage/timeline?minutes=${WINDOW_MINUTES}&bucket_seconds=${BUCKET_SECONDS}`);
  const last = timeline.buckets.slice(-2);
  const recentSeconds = last.length * BUCKET_SECONDS;
  const recentTokens = last.reduce((sum, b) => sum + b.completion_tokens, 0);
  const stat = (value, label) => h("div", { class: "card" }, h("div", { class: "stat" }, value), h("div", { class: "muted" }, label));
  replace(
    document.getElementById("traffic"),
    stat((recentTokens / Math.max(1, recentSeconds)).toFixed(1), "output tokens/s, last minute"),
    stat(String(timeline.requests), `requests, last ${WINDOW_MINUTES} min`),
    stat(String(timeline.completion_tokens), `output tokens, last ${WINDOW_MINUTES} min`),
    stat(String(timeline.errors), `errors, last ${WINDOW_MINUTES} min`),
  );
  replace(document.getElementById("traffic-chart"), barChart(timeline.buckets));
}

async function refreshSystem() {
  const system = await api("/system");
  replace(document.getElementById("system-line"), `modelyard ${system.version} · ${system.database} database · OpenAI base URL `, h("code", {}, system.openai_base_url));
}

refreshSystem();
poll(refreshGpus, GPU_POLL_MS);
poll(refreshDeployments, 3000);
poll(refreshTraffic, 10000);
