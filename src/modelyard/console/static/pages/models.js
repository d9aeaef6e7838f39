// Model files: add a local directory (the server validates it and says what is wrong), pull one
// from a hub with its progress (model_pulls.js), list them.
import { api, badge, errorBox, formatBytes, formatCount, h, okBox, pathName, replace, table } from "../console.js";
import { ModelPulls } from "./model_pulls.js";

const form = document.getElementById("add-model");
const result = document.getElementById("add-result");

// A model's copy on each worker of a cluster ("node-b verified", "node-c missing (worker lost)").
function copies(model) {
  const rows = model.workers ?? [];
  if (!rows.length) return "–";
  return h(
    "ul",
    { class: "plain" },
    rows.map((copy) =>
      h("li", { title: copy.reason || copy.state }, `${copy.worker} `, badge(copy.state),
        copy.worker_state === "lost" ? " (worker lost)" : ""),
    ),
  );
}

async function refresh() {
  const models = await api("/models");
  const onWorkers = models.some((m) => (m.workers ?? []).length);
  replace(
    document.getElementById("models"),
    table(
      [
        ["name", (m) => h("a", { href: `/models/${pathName(m.name)}` }, m.name)],
        ["state", (m) => badge(m.state)],
        ["architecture", (m) => m.architecture ?? "–"],
        ["dtype", (m) => m.dtype ?? "–"],
        ["parameters", (m) => formatCount(m.parameter_count)],
        ["size", (m) => formatBytes(m.size_bytes)],
        ["deployments", (m) => String(m.deployment_count ?? 0)],
        ["path", (m) => h("code", {}, m.on_server === false ? `${m.path} (workers only)` : m.path)],
        ...(onWorkers ? [["workers", copies]] : []),
      ],
      models,
      { empty: "No model files yet: add a directory above." },
    ),
  );
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const path = document.getElementById("model-path").value.trim();
  const name = document.getElementById("model-name").value.trim();
  const button = form.querySelector("button");
  button.disabled = true;
  replace(result, h("p", { class: "muted" }, `Checking ${path}…`));
  try {
    const model = await api("/models", { method: "POST", json: name ? { path, name } : { path } });
    replace(result, okBox(h("p", {}, "Added ", h("a", { href: `/models/${pathName(model.name)}` }, model.name),
      ` (${model.architecture ?? "unknown architecture"}, ${formatBytes(model.size_bytes)}).`)));
    form.reset();
    await refresh();
new ModelPulls({ onModelsChanged: refresh }).start();
  } catch (error) {
    replace(result, errorBox(error));
  } finally {
    button.disabled = false;
  }
});

refresh();
new ModelPulls({ onModelsChanged: refresh }).start();
