// Deployments: every deployment with its state and the reason of each instance (live).
import { api, badge, h, pathName, poll, replace, table } from "../console.js";

async function refresh() {
  const deployments = await api("/deployments");
  replace(
    document.getElementById("deployments"),
    table(
      [
        ["name", (d) => h("a", { href: `/deployments/${pathName(d.name)}` }, d.name)],
        ["state", (d) => badge(d.state)],
        ["replicas", (d) => `${d.instances.filter((i) => i.state === "running").length} running of ${d.replicas}`],
        ["model", (d) => d.model],
        ["backend", (d) => `${d.backend} ${d.backend_version}`],
        ["reasons", (d) => h("ul", { class: "plain" }, d.instances.map((i) => h("li", {}, `#${i.replica_index} ${i.state}: ${i.reason || "–"}`)))],
      ],
      deployments,
      { empty: "No deployments yet." },
    ),
  );
}

poll(refresh, 2000);
