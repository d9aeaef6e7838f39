// Usage: requests, tokens, errors and time to first token (TTFT) by project, user, key or
// deployment per hour or day, as a chart (plotly.js, served by this server: stacked bars for the
// counts, a line per group for TTFT's median or 90th percentile) and a table of each group over
// the whole range (its own report without buckets: percentiles cannot be added up from buckets),
// with the same rows as CSV.
// The form's choices are kept in the address (?group_by=&bucket=&since=&until=&metric=).
import { api, errorBox, formatCount, h, replace, table } from "../console.js";

const form = document.getElementById("range-form");
const range = document.getElementById("range");
const since = document.getElementById("since");
const until = document.getElementById("until");
const groupBy = document.getElementById("group-by");
const bucket = document.getElementById("bucket");
const metric = document.getElementById("metric");
const chart = document.getElementById("chart");

// The chart stacks this many groups (the largest by the metric shown); the rest are one "others".
const CHART_GROUPS = 8;
const METRICS = {
  total_tokens: "Tokens",
  prompt_tokens: "Tokens in",
  completion_tokens: "Tokens out",
  requests: "Requests",
  errors: "Errors",
  ttft_p50_ms: "TTFT p50 (ms)",
  ttft_p90_ms: "TTFT p90 (ms)",
};
// Percentiles are drawn as lines (one per group), never stacked or summed.
const PERCENTILES = new Set(["ttft_p50_ms", "ttft_p90_ms"]);
const GROUP_TITLES = { project: "project", user: "user", key: "API key", deployment: "deployment" };

function localInput(date) {
  const shifted = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return shifted.toISOString().slice(0, 16);
}

function syncInputs() {
  const custom = range.value === "custom";
  since.disabled = !custom;
  until.disabled = !custom;
  if (!custom) {
    const now = new Date();
    until.value = localInput(now);
    since.value = localInput(new Date(now.getTime() - Number(range.value) * 1000));
  }
}

/** The report's query (without format) from the form. */
function reportQuery() {
  const query = new URLSearchParams({ group_by: groupBy.value, bucket: bucket.value });
  if (range.value === "custom") {
    if (since.value) query.set("since", new Date(since.value).toISOString());
    if (until.value) query.set("until", new Date(until.value).toISOString());
  } else {
    query.set("since", new Date(Date.now() - Number(range.value) * 1000).toISOString());
  }
  return query;
}

/** Fill the form from the address, as a shared link or a reload left it. */
function readAddress() {
  const address = new URLSearchParams(location.search);
  for (const [name, select] of [["group_by", groupBy], ["bucket", bucket], ["metric", metric]]) {
    const value = address.get(name);
    if (value && [...select.options].some((option) => option.value === value)) select.value = value;
  }
  if (address.get("since") || address.get("until")) {
    range.value = "custom";
    syncInputs();
    if (address.get("since")) since.value = localInput(new Date(address.get("since")));
    if (address.get("until")) until.value = localInput(new Date(address.get("until")));
  } else {
    syncInputs();
  }
}

function writeAddress(query) {
  const shown = new URLSearchParams(query);
  if (range.value !== "custom") {
    shown.delete("since");
  }
  shown.set("metric", metric.value);
  history.replaceState(null, "", `${location.pathname}?${shown}`);
}

const milliseconds = (value) => (value === null || value === undefined ? "–" : `${Math.round(value)} ms`);

function drawChart(report, groups) {
  const chosen = metric.value;
  const percentile = PERCENTILES.has(chosen);
  // Groups ranked by the metric (by their requests for a percentile), the rest one "others" bar.
  const rank = percentile ? "requests" : chosen;
  const ranked = [...groups].sort((a, b) => (b[rank] ?? 0) - (a[rank] ?? 0) || a.group.localeCompare(b.group));
  const shown = ranked.slice(0, CHART_GROUPS).map((entry) => entry.group);
  const series = new Map(shown.map((group) => [group, new Map()]));
  if (ranked.length > CHART_GROUPS && !percentile) series.set("others", new Map());
  for (const row of report.rows) {
    const values = series.get(series.has(row.group) ? row.group : "others");
    if (!values) continue;
    if (percentile) values.set(row.bucket_start, row[chosen]);
    else values.set(row.bucket_start, (values.get(row.bucket_start) ?? 0) + row[chosen]);
  }
  const traces = [...series].map(([group, values]) => ({
    type: percentile ? "scatter" : "bar",
    mode: percentile ? "lines+markers" : undefined,
    connectgaps: false,
    name: group,
    x: report.buckets,
    y: report.buckets.map((start) => values.get(start) ?? (percentile ? null : 0)),
    hovertemplate: `%{x}<br>${group}: %{y}<extra></extra>`,
  }));
  const per = report.bucket === "hour" ? "hour" : "day";
  document.getElementById("chart-title").textContent = `${METRICS[chosen]} per ${per}, by ${GROUP_TITLES[report.group_by]}`;
  const total = report.totals[chosen];
  const amount = percentile ? `${milliseconds(total)} over every request` : `${formatCount(total)} ${METRICS[chosen].toLowerCase()}`;
  document.getElementById("chart-caption").textContent = groups.length
    ? `${amount} from ${new Date(report.since).toLocaleString()} to ${new Date(report.until).toLocaleString()} (UTC ${per}s)`
    : "No requests through the gateway in this range.";
  window.Plotly.react(
    chart,
    traces,
    {
      barmode: "stack",
      height: 320,
      margin: { l: 56, r: 12, t: 12, b: 48 },
      showlegend: true,
      legend: { orientation: "h", y: -0.2 },
      xaxis: { type: "date" },
      yaxis: { rangemode: "tozero", title: { text: METRICS[chosen] } },
    },
    { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] },
  );
}

async function refresh() {
  const query = reportQuery();
  writeAddress(query);
  const csv = new URLSearchParams(query);
  csv.set("format", "csv");
  document.getElementById("csv-link").href = `/api/v1/usage/report?${csv}`;
  document.getElementById("csv-bucket").textContent = bucket.value;
  document.getElementById("groups-title").textContent = `By ${GROUP_TITLES[groupBy.value]}`;
  try {
    const whole = new URLSearchParams(query);
    whole.set("bucket", "");
    const [report, overall] = await Promise.all([api(`/usage/report?${query}`), api(`/usage/report?${whole}`)]);
    const totals = report.totals;
    const stat = (value, label) => h("div", { class: "card" }, h("div", { class: "stat" }, value), h("div", { class: "muted" }, label));
    replace(document.getElementById("totals"),
      stat(String(totals.requests), "requests"),
      stat(formatCount(totals.prompt_tokens), "tokens in (prompt)"),
      stat(formatCount(totals.completion_tokens), "tokens out (completion)"),
      stat(String(totals.errors), "errors"),
      stat(`${milliseconds(totals.ttft_p50_ms)} / ${milliseconds(totals.ttft_p90_ms)}`, "time to first token, p50 / p90"));
    const groups = overall.rows;
    replace(document.getElementById("groups"), table(
      [
        [GROUP_TITLES[report.group_by], (r) => r.group],
        ["requests", (r) => String(r.requests)],
        ["tokens in", (r) => String(r.prompt_tokens)],
        ["tokens out", (r) => String(r.completion_tokens)],
        ["tokens", (r) => String(r.total_tokens)],
        ["errors", (r) => String(r.errors)],
        ["without usage", (r) => String(r.requests_without_usage)],
        ["TTFT p50", (r) => milliseconds(r.ttft_p50_ms)],
        ["TTFT p90", (r) => milliseconds(r.ttft_p90_ms)],
      ],
      groups,
      { empty: "No requests through the gateway in this range.", caption: `Usage by ${report.group_by}` },
    ));
    drawChart(report, groups);
  } catch (error) {
    replace(document.getElementById("groups"), errorBox(error));
    replace(document.getElementById("totals"));
  }
}

range.addEventListener("change", () => {
  syncInputs();
  if (range.value !== "custom") refresh();
});
for (const select of [groupBy, bucket, metric]) select.addEventListener("change", refresh);
form.addEventListener("submit", (event) => {
  event.preventDefault();
  refresh();
});

readAddress();
refresh();
