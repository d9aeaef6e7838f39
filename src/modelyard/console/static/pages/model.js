// One model file: every field the API gives (architecture, dtype, parameters, size, files...), delete.
import { api, errorBox, facts, formatBytes, formatCount, h, main, pathName, replace } from "../console.js";

const name = main().dataset.name;

async function load() {
  const model = await api(`/models/${pathName(name)}`);
  // How the files were checked against their hub, in words ("7 files checked by SHA-256, ... 1 not checked: ...").
  const verification = model.verification ? model.verification.summary : null;
  const shown = { ...model, verification, size_bytes: formatBytes(model.size_bytes), parameter_count: formatCount(model.parameter_count) };
  const details = shown.details ?? {};
  delete shown.details;
  replace(
    document.getElementById("model"),
    h("section", { class: "card" }, h("h2", {}, "Facts"), facts(shown, { labels: { size_bytes: "size", parameter_count: "parameters" } })),
    Object.keys(details).length ? h("section", { class: "card" }, h("h2", {}, "Details"), facts(details)) : null,
  );
  const remove = h("button", { type: "button", class: "danger", id: "delete-model" }, "Delete");
  remove.addEventListener("click", async () => {
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
