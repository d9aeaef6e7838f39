// Dashboard: GPUs (live; operators and admins), deployments with state and reason, gateway traffic of the last minutes.
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

const SVG = "http://www.w3.org/2000/svg";
// The chart's height in pixels; its width is the card's, drawn 1:1 (nothing is stretched).
const CHART_HEIGHT_PX = 160;
const AXIS_LEFT_PX = 44;
const AXIS_BOTTOM_PX = 20;
const TOP_PX = 8;
// A time label every this many minutes (at round times: 10:05, 10:10, ...).
const TIME_LABEL_MINUTES = 5;

function svgElement(tag, attributes, text) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

function clock(date) {
  return date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

/** A rate as a person reads it: 0.42, 7.5, 128, 12.3 k. */
function rate(value) {
  if (value >= 1000) return `${(value / 1000).toFixed(1)} k`;
  if (value >= 100) return value.toFixed(0);
  if (value >= 1) return value.toFixed(1);
  return value.toFixed(2);
}

/** Output tokens/s per bucket as bars over a time axis, ``widthPx`` wide (the card's width). */
function barChart(buckets, widthPx) {
  const width = Math.max(200, Math.round(widthPx));
  const height = CHART_HEIGHT_PX;
  const svg = svgElement("svg", { viewBox: `0 0 ${width} ${height}`, width, height, "aria-hidden": "true" });
  const plotWidth = width - AXIS_LEFT_PX - 4;
  const plotHeight = height - AXIS_BOTTOM_PX - TOP_PX;
  const baseline = TOP_PX + plotHeight;
  const peakBucket = buckets.reduce((best, bucket) => (!best || bucket.tokens_per_second > best.tokens_per_second ? bucket : best), null);
  const peak = peakBucket?.tokens_per_second ?? 0;
  const step = plotWidth / Math.max(1, buckets.length);
  svg.append(svgElement("line", { class: "axis-line", x1: AXIS_LEFT_PX, x2: width - 4, y1: baseline, y2: baseline }));
  svg.append(svgElement("text", { x: AXIS_LEFT_PX - 6, y: baseline + 4, "text-anchor": "end" }, "0"));
  if (peak > 0) {
    svg.append(svgElement("line", { class: "grid-line", x1: AXIS_LEFT_PX, x2: width - 4, y1: TOP_PX, y2: TOP_PX }));
    svg.append(svgElement("text", { class: "peak", x: AXIS_LEFT_PX - 6, y: TOP_PX + 4, "text-anchor": "end" }, rate(peak)));
    buckets.forEach((bucket, index) => {
      const barHeight = (plotHeight * bucket.tokens_per_second) / peak;
      const bar = svgElement("rect", { class: "bar", x: AXIS_LEFT_PX + index * step + 1, y: baseline - barHeight, width: Math.max(1, step - 2), height: barHeight });
      bar.append(svgElement("title", {}, `${clock(new Date(bucket.start))}: ${bucket.tokens_per_second.toFixed(1)} output tokens/s, ${bucket.requests} requests`));
      svg.append(bar);
    });
  } else {
    const requests = buckets.reduce((sum, bucket) => sum + bucket.requests, 0);
    svg.append(svgElement("text", { class: "empty", x: AXIS_LEFT_PX + plotWidth / 2, y: TOP_PX + plotHeight / 2, "text-anchor": "middle" },
      requests ? `No output tokens in this range (${requests} requests)` : "No traffic in this range"));
  }
  // The time axis: a tick and a clock label at each round 5 minutes (10:05, 10:10, ...) of the
  // range, fewer where they would be closer than ~60 px.
  const axis = svgElement("g", { class: "axis-time" });
  if (buckets.length) {
    const first = Date.parse(buckets[0].start);
    const spanMs = buckets.length * BUCKET_SECONDS * 1000;
    const everyMs = TIME_LABEL_MINUTES * 60_000;
    const pxPerMs = plotWidth / spanMs;
    const stepMs = everyMs * Math.max(1, Math.ceil(60 / (everyMs * pxPerMs)));
    for (let at = Math.ceil(first / stepMs) * stepMs; at <= first + spanMs; at += stepMs) {
      const x = AXIS_LEFT_PX + (at - first) * pxPerMs;
      axis.append(svgElement("line", { class: "axis-line", x1: x, x2: x, y1: baseline, y2: baseline + 4 }));
      const anchor = x < AXIS_LEFT_PX + 20 ? "start" : x > width - 24 ? "end" : "middle";
      axis.append(svgElement("text", { x, y: height - 4, "text-anchor": anchor }, clock(new Date(at))));
    }
  }
  svg.append(axis);
  return { svg, peak, peakAt: peakBucket && peak > 0 ? new Date(peakBucket.start) : null };
}

let lastBuckets = null;

function drawTraffic() {
  if (!lastBuckets) return;
  const container = document.getElementById("traffic-chart");
  const style = getComputedStyle(container);
  const inner = container.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const { svg, peak, peakAt } = barChart(lastBuckets, inner);
  const caption = peak > 0
    ? `Output tokens/s through the gateway, one bar per ${BUCKET_SECONDS} s; peak ${rate(peak)} output tokens/s at ${clock(peakAt)}.`
    : `Output tokens/s through the gateway, one bar per ${BUCKET_SECONDS} s.`;
  container.setAttribute("aria-label", caption);
  replace(container, svg, h("figcaption", {}, caption));
}

// Drawn again when the card's width changes (a rotated phone, a resized window), not its height.
let drawnWidth = 0;
new ResizeObserver(([entry]) => {
  if (Math.abs(entry.contentRect.width - drawnWidth) < 1) return;
  drawnWidth = entry.contentRect.width;
  drawTraffic();
}).observe(document.getElementById("traffic-chart"));

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
  lastBuckets = timeline.buckets;
  drawTraffic();
}

async function refreshSystem() {
  const system = await api("/system");
  replace(document.getElementById("system-line"), `modelyard ${system.version} · ${system.database} database · OpenAI base URL `, h("code", {}, system.openai_base_url));
}

refreshSystem();
// The GPUs are for operators and admins: the page has no GPU section for a member.
if (document.getElementById("gpus")) poll(refreshGpus, GPU_POLL_MS);
poll(refreshDeployments, 3000);
poll(refreshTraffic, 10000);
