// One model file: every field the API gives (architecture, dtype, parameters, size, files...), delete.
import { api, badge, controlButton, errorBox, facts, formatBytes, formatCount, h, main, pathName, replace, table } from "../console.js";

const name = main().dataset.name;

async function load() {
  const model = await api(`/models/${pathName(name)}`);
  // How the files were checked against their hub, in words ("7 files checked by SHA-256, ... 1 not checked: ...").
  const verification = model.verification ? model.verification.summary : null;
  const shown = { ...model, verification, size_bytes: formatBytes(model.size_bytes), parameter_count: formatCount(model.parameter_count) };
  const details = shown.details ?? {};
  delete shown.details;
  const workers = shown.workers ?? [];
  delete shown.workers;
  // On a cluster: the model's copy on each worker, and the command that copies it where it lacks.
  const lacking = workers.filter((copy) => !["verified", "present"].includes(copy.state)).map((copy) => copy.worker);
  const onWorkers = workers.length
    ? h(
        "section",
        { class: "card", "aria-labelledby": "workers-heading" },
        h("h2", { id: "workers-heading" }, "On the workers"),
        table(
          [
            ["worker", (c) => c.worker + (c.worker_state === "lost" ? " (lost)" : "")],
            ["state", (c) => badge(c.state)],
            ["verified at", (c) => c.verified_at ?? "–"],
            ["checked at", (c) => c.checked_at ?? "–"],
            ["reason", (c) => c.reason || "–"],
          ],
          workers,
          { caption: "The model's files on each worker" },
        ),
        lacking.length && model.on_server !== false
          ? h("p", {}, "Copy it there: ", h("code", {}, `modelyard models push ${name} ${lacking.map((w) => `--worker ${w}`).join(" ")}`))
          : null,
      )
    : null;
  replace(
    document.getElementById("model"),
    h("section", { class: "card" }, h("h2", {}, "Facts"), facts(shown, { labels: { size_bytes: "size", parameter_count: "parameters" } })),
    onWorkers,
    Object.keys(details).length ? h("section", { class: "card" }, h("h2", {}, "Details"), facts(details)) : null,
  );
  const remove = controlButton("DELETE /api/v1/models/{name:path}", { class: "danger", id: "delete-model" }, "Delete");
  remove?.addEventListener("click", async () => {
    if (!confirm(`Remove model ${name}? The files on disk stay.`)) return;
    try {
      await api(`/models/${pathName(name)}`, { method: "DELETE" });
      window.location.assign("/models");
    } catch (error) {
      replace(document.getElementById("action-result"), errorBox(error));
    }
  });
  const deploy = h("a", { class: "button secondary", href: `/deployments/new?model=${encodeURIComponent(name)}` }, "Deploy");
  replace(document.getElementById("actions"), deploy, remove);
}

load().catch((error) => replace(document.getElementById("model"), errorBox(error)));
