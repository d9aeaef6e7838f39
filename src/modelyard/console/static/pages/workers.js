// Workers: the hosts engines run on (GET /api/v1/workers): state, GPUs, what each host's Docker
// can do (as its join found it), its engine port range, labels, when last seen.
import { api, badge, formatBytes, formatTime, h, poll, replace, table } from "../console.js";

// The server reads the workers every few seconds; asking more often would show nothing new.
const POLL_MS = 5000;

const DOCKER_SHOWN = {
  "ready/nvidia": "ready, NVIDIA runtime",
  "ready/cdi": "ready, CDI",
  "ready/none": "ready, no GPU runtime",
};

/** What the worker's Docker can do, in words; a host that recorded nothing shows a dash. */
function dockerText(docker) {
  if (!docker) return "–";
  return DOCKER_SHOWN[`${docker.engine}/${docker.gpus}`] ?? docker.engine.replace("-", " ");
}

function gpus(worker) {
  if (!worker.gpus.length) return h("span", { class: "muted" }, worker.probe_problem ?? "no GPU");
  return h(
    "ul",
    { class: "plain" },
    worker.gpus.map((gpu) => h("li", {}, `GPU ${gpu.index} · ${gpu.name} · ${formatBytes(gpu.memory_used_bytes)} of ${formatBytes(gpu.memory_total_bytes)} used`)),
  );
}

function labels(worker) {
  // modelyard's own labels (the name, Docker, engine ports) have columns of their own.
  const own = Object.entries(worker.labels).filter(([key]) => !key.startsWith("modelyard.io/"));
  return own.map(([key, value]) => `${key}=${value}`).join(", ") || "–";
}

async function refresh() {
  const answer = await api("/workers");
  replace(document.getElementById("cluster-line"), answer.cluster ? `Cluster head at ${answer.cluster}` : "One host (no cluster)");
  replace(
    document.getElementById("workers"),
    table(
      [
        ["worker", (w) => w.name],
        ["state", (w) => badge(w.state)],
        ["address", (w) => w.address],
        ["Docker", (w) => h("span", { class: "docker", dataset: { engine: w.docker?.engine ?? "" } }, dockerText(w.docker))],
        ["engine ports", (w) => w.engine_ports ?? "any"],
        ["GPUs", gpus],
        ["labels", labels],
        ["last seen", (w) => (w.last_seen_at ? formatTime(new Date(w.last_seen_at * 1000).toISOString()) : "never")],
      ],
      answer.workers,
      { empty: "No workers.", caption: "Workers" },
    ),
  );
}

poll(refresh, POLL_MS);
