// Dashboard: GPUs (live), deployments with state and reason, gateway traffic of the last minutes.
import { api, badge, formatBytes, h, pathName, poll, replace, table } from "../console.js";

const WINDOW_MINUTES = 15;
const BUCKET_SECONDS = 30;

function gpuCard(gpu) {
  const usedShare = gpu.memory_total_bytes ? gpu.memory_used_bytes / gpu.memory_total_bytes : 0;
  const meter = (share) => {
    const fill = h("span");
    fill.style.width = `${Math.round(Math.min(1, Math.max(0, share)) * 100)}%`;
    return h("div", { class: "meter", "aria-hidden": "true" }, fill);
  };
  return h(
    "article",
    { class: "card gpu", dataset: { index: gpu.index } },
    h("h3", {}, `GPU ${gpu.index}: ${gpu.name}`),
    h("div", {}, `utilization ${gpu.utilization_percent ?? "–"} %`),
    meter((gpu.utilization_percent ?? 0) / 100),
    h("div", {}, `memory ${formatBytes(gpu.memory_used_bytes)} used, ${formatBytes(gpu.memory_free_bytes)} free of ${formatBytes(gpu.memory_total_bytes)}`),
    meter(usedShare),
    h("div", {}, `temperature ${gpu.temperature_celsius ?? "–"} °C · power ${gpu.power_watts?.toFixed(0) ?? "–"} W`,
      gpu.power_limit_watts ? ` of ${gpu.power_limit_watts.toFixed(0)} W` : ""),
  );
}

async function refreshGpus() {
  const inventory = await api("/gpus");
  const container = document.getElementById("gpus");
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
poll(refreshGpus, 3000);
poll(refreshDeployments, 3000);
poll(refreshTraffic, 10000);
